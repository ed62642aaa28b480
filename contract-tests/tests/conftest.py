from __future__ import annotations

import sys
from pathlib import Path

# The helpers beside the tests (`class_form`, `broken_backends`) import by name under --import-mode=importlib.
sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["pytester"]

# Imported once, before any in-process pytester run: a run drops the modules it imported, and a
# `cryptography.fernet` imported again would define a new `InvalidToken` while the compiled
# Fernet (loaded once per process) still raises the first one, uncaught by `soniq.encryption`.
try:
    import cryptography.fernet  # noqa: F401
except ImportError:  # the key-rotation contract seals with stand-in tokens then
    pass
