from __future__ import annotations

import os
import sys
from pathlib import Path

# Apps built in these tests get exactly the observers a test hands them; the entry-point and
# process tests choose the installed ones on purpose.
os.environ.setdefault("SONIQ_OBSERVERS", "")
# With --import-mode=importlib the tests folder is not importable by default; the helpers live in it.
sys.path.insert(0, str(Path(__file__).parent))
