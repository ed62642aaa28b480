"""The URL form: ``pytest --pyargs soniq_contract_tests --soniq-url URL``.

The backend class is the one registered for the URL's scheme in the
``soniq.backends`` entry-point group; ``--soniq-option key=value`` adds
keywords to its ``from_url``. The worker processes of the real-process
scenarios open the same URL with the same options (derived from the
`UrlBackendFactory`, as in the class form). The corrupt-row writer and the
caller's transaction are the ones the backend's package registers in the
``soniq_contract_tests.fixtures`` entry-point group.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from soniq_contract_tests.harness import BackendFactory, UrlBackendFactory
from soniq_contract_tests.suite import BackendContractSuite

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
    from soniq.backend import backend_class_for

    backend_class_for(url)  # an unknown scheme fails here, naming what is installed
    return UrlBackendFactory(url, parse_options(pytestconfig.getoption("--soniq-option")))


class TestBackendContract(BackendContractSuite):
    @pytest.fixture
    def soniq_backend_factory(self, soniq_url_factory: UrlBackendFactory) -> BackendFactory:
        return soniq_url_factory

    @pytest.fixture
    def soniq_worker_url(self, soniq_url_factory: UrlBackendFactory) -> str | None:
        return soniq_url_factory.url
