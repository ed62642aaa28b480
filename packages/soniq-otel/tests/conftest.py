from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

# Apps built in these tests get exactly the observers a test hands them, never the installed one
# over the global provider; the entry-point test unsets this on purpose.
os.environ.setdefault("SONIQ_OBSERVERS", "")
# With --import-mode=importlib the tests folder is not importable by default; the helpers live in it.
sys.path.insert(0, str(Path(__file__).parent))

from otel_testing import Tracing, make_app

from soniq import Soniq


@pytest.fixture
def tracing() -> Iterator[Tracing]:
    t = Tracing()
    yield t
    t.provider.shutdown()


@pytest_asyncio.fixture
async def app(tracing: Tracing) -> AsyncIterator[Soniq]:
    application = make_app(tracing)
    yield application
    await application.close()
