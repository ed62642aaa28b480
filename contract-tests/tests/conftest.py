from __future__ import annotations

import sys
from pathlib import Path

# The helpers beside the tests (`class_form`, `broken_backends`) import by name under --import-mode=importlib.
sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["pytester"]
