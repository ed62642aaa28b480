from __future__ import annotations

import os
import sys

# `python -m soniq` puts the working directory first on sys.path, where a stray aiosqlite.py or
# asyncpg.py would shadow the real driver; the CLI adds it back last, for the jobs modules.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from soniq.cli import main

raise SystemExit(main())
