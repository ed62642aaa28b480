"""The URL form: ``pytest --pyargs soniq_contract_tests --soniq-url URL``.

The backend class is the one registered for the URL's scheme in the
``soniq.backends`` entry-point group; ``--soniq-option key=value`` adds
keywords to its ``from_url``. The worker processes of the real-process
scenarios open the same URL with the same options; for a PostgreSQL URL the
transactional-enqueue contract opens its own asyncpg connection to it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from soniq.backend import Backend
from soniq_contract_tests.harness import BackendFactory, UrlBackendFactory
from soniq_contract_tests.suite import BackendContractSuite, TransactionFactory

URL_ENV_VAR = "SONIQ_CONTRACT_URL"


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value that parses as JSON (``3``, ``true``, ``"x"``) is passed decoded."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise pytest.UsageError(f"--soniq-option expects KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(raw)
        except ValueError:
            options[key] = raw
    return options


@pytest.fixture(scope="session")
def soniq_url_factory(pytestconfig: pytest.Config) -> UrlBackendFactory:
    url = pytestconfig.getoption("--soniq-url") or os.environ.get(URL_ENV_VAR)
    if not url:
        pytest.skip(
            f"the Soniq contract suite needs a backend: pass --soniq-url URL (or set {URL_ENV_VAR}), "
            "e.g. pytest --pyargs soniq_contract_tests --soniq-url memory://"
        )
    from soniq.discovery import backend_class_for

    backend_class_for(url)  # an unknown scheme fails here, naming what is installed
    return UrlBackendFactory(url, parse_options(pytestconfig.getoption("--soniq-option")))


POSTGRES_SCHEMES = ("postgresql", "postgres")


def postgres_transaction(url: str) -> TransactionFactory:
    """A transaction on a fresh asyncpg connection to `url` (without Soniq's query parameters)."""
    parts = urlsplit(url)
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))

    @contextlib.asynccontextmanager
    async def transaction(backend: Backend) -> AsyncIterator[Any]:
        import asyncpg

        connection = await asyncpg.connect(dsn)
        try:
            async with connection.transaction():
                yield connection
        finally:
            await connection.close()

    return transaction


class TestBackendContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, soniq_url_factory: UrlBackendFactory) -> BackendFactory:
        return soniq_url_factory

    @pytest.fixture
    def soniq_worker_url(self, soniq_url_factory: UrlBackendFactory) -> str | None:
        return soniq_url_factory.url

    @pytest.fixture
    def soniq_transaction(self, soniq_url_factory: UrlBackendFactory) -> TransactionFactory | None:
        scheme = urlsplit(soniq_url_factory.url).scheme.split("+", 1)[0].lower()
        return postgres_transaction(soniq_url_factory.url) if scheme in POSTGRES_SCHEMES else None
