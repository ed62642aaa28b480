from __future__ import annotations

import pytest

from soniq import BackendNotFoundError, InvalidURLError, Soniq
from soniq.discovery import installed_schemes, plugins, register_backend, unregister_backend, url_scheme


def test_scheme_is_read_from_the_url() -> None:
    assert url_scheme("postgresql+asyncpg://h/db") == "postgresql"
    assert url_scheme("SQLITE:///x.db") == "sqlite"


@pytest.mark.parametrize("url", ["", "no-scheme-here", "://nothing"])
def test_bad_urls_fail_with_an_invalid_url_error(url: str) -> None:
    with pytest.raises(InvalidURLError) as info:
        url_scheme(url)
    assert "URL" in str(info.value)


def test_unknown_scheme_names_scheme_installed_schemes_and_distribution() -> None:
    app = Soniq("mysql://localhost/db")  # resolved at first use, so --database-url can still override
    with pytest.raises(BackendNotFoundError) as info:
        _ = app.backend
    message = str(info.value)
    assert "'mysql'" in message
    for scheme in ("memory", "sqlite", "postgresql"):
        assert scheme in message
    assert "install a distribution" in message


def test_known_but_missing_scheme_names_the_distribution_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import soniq.discovery as discovery

    monkeypatch.setattr(discovery, "_entry_points", lambda group: [])
    app = Soniq("postgresql://localhost/db")
    with pytest.raises(BackendNotFoundError) as info:
        _ = app.backend
    message = str(info.value)
    assert "installed schemes: none" in message
    assert "pip install soniq-postgres" in message


def test_our_backends_are_found_through_entry_points() -> None:
    found = {p.name: p for p in plugins("soniq.backends")}
    assert {"memory", "sqlite", "postgresql", "postgres"} <= set(found)
    assert found["memory"].distribution == "soniq-memory"
    assert found["memory"].version
    assert set(installed_schemes()) >= {"memory", "sqlite"}


def test_register_backend_serves_a_scheme_in_process() -> None:
    from soniq_memory import MemoryBackend

    class InProcess(MemoryBackend):
        @classmethod
        def from_url(cls, url: str, **options: object) -> InProcess:
            return cls()

    register_backend("inproc", InProcess)
    try:
        app = Soniq("inproc://")
        assert isinstance(app.backend, InProcess)
    finally:
        unregister_backend("inproc")


def test_import_soniq_loads_no_backend() -> None:
    import subprocess
    import sys

    code = "import sys, soniq; print([m for m in sys.modules if m.startswith(('soniq_', 'aiosqlite', 'asyncpg'))])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
