from soniq.cli import main

raise SystemExit(main())
