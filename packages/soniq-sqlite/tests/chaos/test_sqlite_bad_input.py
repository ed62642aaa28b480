"""Bad input met by real ``soniq worker`` processes on SQLite; nothing else in the queue is affected."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from soniq_contract_tests.chaos_scenarios import Namespace, check_bad_arguments, check_bad_handlers, one_error_line

pytestmark = pytest.mark.chaos


@pytest.fixture
def space(tmp_path: Path) -> Iterator[Namespace]:
    namespace = Namespace(f"sqlite:///{tmp_path / 'queue.db'}", "bad_input", tmp_path)
    yield namespace
    namespace.cleanup()


def test_unserialisable_and_oversized_arguments_are_refused_and_the_queue_is_untouched(space: Namespace) -> None:
    check_bad_arguments(space)


def test_base_exceptions_and_bad_results_are_dead_lettered_unknown_names_stay_queued_and_the_worker_lives(
    space: Namespace,
) -> None:
    check_bad_handlers(space)


# Every setting that an environment variable can get wrong. (jobs_modules and queues accept any
# string; a jobs module that fails to import is covered by soniq-core's CLI tests.)
BAD_SETTINGS = [
    ("concurrency", "zero", "expected a whole number"),
    ("job_timeout", "0", "at least 0.001"),
    ("shutdown_timeout", "-1", "at least 0"),
    ("sync_handler_grace_seconds", "-5", "at least 0"),
    ("sync_handler_pool_size", "0", "at least 1"),
    ("heartbeat_interval", "soon", "expected a number"),
    ("heartbeat_timeout", "0.5", "must be at least 3 x heartbeat_interval"),
    ("poll_interval", "0", "must be at least 0.01"),
    ("prefetch", "-1", "at least 0"),
    ("prefetch_release_timeout", "inf", "finite"),
    ("stale_job_policy", "bury", "expected one of requeue, dead_letter"),
    ("observers", "no_such_observer", "no_such_observer"),
    ("retry_backoff_base", "-1", "at least 0"),
    ("retry_backoff_max", "0.01", "at least retry_backoff_base"),
    ("max_args_bytes", "0", "at least 1"),
]


@pytest.mark.parametrize(("name", "value", "fragment"), BAD_SETTINGS, ids=[s[0] for s in BAD_SETTINGS])
def test_a_worker_with_an_invalid_setting_refuses_to_start_in_one_line(
    space: Namespace, name: str, value: str, fragment: str
) -> None:
    bystander = space.enqueue("chaos.async", key="bystander", seconds=0, fate="ok")
    line = one_error_line(space.soniq("worker", **{name: value}))
    assert fragment in line
    if name != "observers":  # an unknown observer is named by itself and its variable, not as a setting
        assert f"setting '{name}'" in line
    assert f"SONIQ_{name.upper()}" in line
    row = space.job(bystander)
    assert row is not None
    assert (row["status"], row["attempts"], row["worker_id"]) == ("queued", 0, None)


def test_a_bad_database_url_is_one_line(space: Namespace) -> None:
    line = one_error_line(space.soniq("worker", "--database-url", "not a url"))
    assert "SONIQ_DATABASE_URL" in line
    missing = space.directory / "no_such_dir" / "queue.db"
    line = one_error_line(space.soniq("worker", "--database-url", f"sqlite:///{missing}"))
    assert f"the directory {missing.parent} does not exist" in line
