"""soniq 0.1.0 names that do not depend on a backend still work: a non-string cron expression is a
`TypeError`, and `soniq.testing.memory_backend` is 0.1.0's path to the in-memory backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

import soniq.testing
from soniq import ScheduleError, Soniq, cron
from soniq.testing import drain


@pytest.mark.parametrize("expr", [123, 1.5, None, ["*/5", "*", "*", "*", "*"]])
def test_cron_of_a_non_string_is_a_type_error_and_a_schedule_error(expr: object) -> None:
    with pytest.raises(TypeError, match=r"^cron: expected a cron expression string") as caught:
        cron(expr)  # type: ignore[arg-type]
    assert isinstance(caught.value, ScheduleError)
    assert caught.value.field == "cron"
    assert caught.value.code == "SONIQ_SCHEDULE_TYPE"  # every error class has its own code


def test_a_schedule_option_of_the_wrong_type_is_a_type_error_where_0_1_raised_one() -> None:
    app = Soniq("memory://")
    with pytest.raises(TypeError, match=r"^cron: "):
        app.periodic(cron=5, name="a")
    with pytest.raises(TypeError, match=r"^every: "):
        app.periodic(every="60", name="b")
    # A wrong value of the right type stays a ValueError only.
    with pytest.raises(ValueError, match=r"^cron: ") as caught:
        cron("61 * * * *")
    assert not isinstance(caught.value, TypeError)
    assert cron("*/5 * * * *") == "*/5 * * * *"
    assert app.periodic(every=timedelta(minutes=1), name="c") is not None


@pytest.mark.asyncio
async def test_memory_backend_module_is_0_1_s_path_to_the_in_memory_backend() -> None:
    from soniq.testing.memory_backend import MemoryBackend

    assert MemoryBackend is soniq.testing.MemoryBackend
    assert MemoryBackend.__module__.startswith("soniq_memory")
    app = Soniq(backend=MemoryBackend())

    @app.job(name="double")
    async def double(n: int) -> int:
        return n * 2

    await double.enqueue(n=21)
    assert await drain(app) == [42]
    await app.close()


def test_memory_backend_module_without_soniq_memory_says_to_install_it() -> None:
    # A Python where soniq_memory cannot be imported, as when the distribution is not installed.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["soniq_memory"] = None
        try:
            from soniq.testing.memory_backend import MemoryBackend
        except ImportError as exc:
            print(type(exc).__name__, exc.name)
            print(exc)
        else:
            print("imported", MemoryBackend)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    first, message = done.stdout.splitlines()[:2]
    assert first == "ImportError soniq_memory", done.stdout + done.stderr
    assert "needs the soniq-memory distribution" in message
    assert "pip install soniq-memory" in message
