from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from soniq.discovery import create_backend
from soniq.errors import InvalidURLError
from soniq_sqlite import SQLiteBackend


def test_three_slashes_is_a_file_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    backend = SQLiteBackend.from_url("sqlite:///soniq.db")
    assert backend.location.path == tmp_path / "soniq.db"


def test_four_slashes_is_an_absolute_path() -> None:
    backend = SQLiteBackend.from_url("sqlite:////var/data/jobs.db")
    assert backend.location.path == Path("/var/data/jobs.db")


def test_percent_escapes_in_the_path_are_decoded(tmp_path: Path) -> None:
    backend = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/my%20jobs.db")
    assert backend.location.path == tmp_path / "my jobs.db"


def test_driver_suffix_in_the_scheme_is_accepted(tmp_path: Path) -> None:
    backend = SQLiteBackend.from_url(f"sqlite+aiosqlite:///{tmp_path}/a.db")
    assert backend.location.path == tmp_path / "a.db"


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://"])
def test_memory_urls_are_private_to_the_instance(url: str) -> None:
    backend = SQLiteBackend.from_url(url)
    assert backend.location.is_memory
    assert backend.capabilities.shared_across_processes is False


def test_a_file_is_shared_across_processes_without_push_wakeup(tmp_path: Path) -> None:
    capabilities = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/a.db").capabilities
    assert capabilities.shared_across_processes is True
    assert capabilities.push_wakeup is False
    assert capabilities.transactional_enqueue is False
    assert capabilities.timestamp_precision == timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("sqlite://somehost/jobs.db", "no host"),
        ("sqlite:///jobs.db?timeout=3", "unknown option.*timeout.*accepted options: namespace"),
        ("sqlite:///", "names no file"),
        ("sqlite:///data/", "directory"),
        ("postgresql:///jobs.db", "scheme"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, complaint: str) -> None:
    with pytest.raises(InvalidURLError, match=complaint):
        SQLiteBackend.from_url(url)


def test_namespace_is_a_sibling_file(tmp_path: Path) -> None:
    backend = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/soniq.db", namespace="x")
    assert backend.location.path == tmp_path / "soniq.x.db"


def test_namespace_of_a_file_without_suffix(tmp_path: Path) -> None:
    backend = SQLiteBackend.from_url(f"sqlite:///{tmp_path}/queue", namespace="t1")
    assert backend.location.path == tmp_path / "queue.t1"


@pytest.mark.parametrize("namespace", ["", "../escape", "a/b", "a.b", "x" * 64])
def test_namespace_must_be_a_safe_file_name_part(tmp_path: Path, namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        SQLiteBackend.from_url(f"sqlite:///{tmp_path}/soniq.db", namespace=namespace)


def test_unknown_option_names_it_and_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(TypeError) as caught:
        SQLiteBackend.from_url(f"sqlite:///{tmp_path}/a.db", pool_size=4)
    message = str(caught.value)
    assert "'pool_size'" in message
    for accepted in ("namespace", "busy_timeout", "synchronous"):
        assert accepted in message


@pytest.mark.parametrize("value", [0, -1, "5", True])
def test_busy_timeout_must_be_positive_seconds(tmp_path: Path, value: object) -> None:
    with pytest.raises(ValueError, match="busy_timeout"):
        SQLiteBackend.from_url(f"sqlite:///{tmp_path}/a.db", busy_timeout=value)


def test_synchronous_must_be_a_sqlite_level(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteBackend.from_url(f"sqlite:///{tmp_path}/a.db", synchronous="sometimes")


def test_from_url_opens_nothing(tmp_path: Path) -> None:
    SQLiteBackend.from_url(f"sqlite:///{tmp_path}/never.db")
    assert list(tmp_path.iterdir()) == []


def test_discovery_resolves_the_sqlite_scheme_to_this_backend(tmp_path: Path) -> None:
    backend = create_backend(f"sqlite:///{tmp_path}/a.db", namespace="d")
    assert isinstance(backend, SQLiteBackend)
    assert backend.location.path == tmp_path / "a.d.db"
