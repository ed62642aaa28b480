"""Every exception Soniq raises on purpose derives from `SoniqError`."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from soniq.instructions import Permanent as Permanent
from soniq.instructions import Snooze as Snooze

if TYPE_CHECKING:
    from soniq.schema_state import SchemaFamily

# -- error codes ------------------------------------------------------------

SONIQ_UNKNOWN_TASK_NAME = "SONIQ_UNKNOWN_TASK_NAME"
SONIQ_INVALID_TASK_NAME = "SONIQ_INVALID_TASK_NAME"
SONIQ_TASK_ARGS_INVALID = "SONIQ_TASK_ARGS_INVALID"
SONIQ_PLUGIN_DUPLICATE = "SONIQ_PLUGIN_DUPLICATE"
SONIQ_UNKNOWN_SETTING = "SONIQ_UNKNOWN_SETTING"
SONIQ_UNSUPPORTED_SETTING = "SONIQ_UNSUPPORTED_SETTING"

_CLASS_CODES = {
    # Classes whose 0.1.0 counterpart had a code keep that code; the rest get one from their name.
    "UnknownJobError": SONIQ_UNKNOWN_TASK_NAME,
    "JobArgumentsError": SONIQ_TASK_ARGS_INVALID,
    "SettingsError": "SONIQ_INVALID_SETTING",
    "JobOptionsError": "SONIQ_INVALID_JOB_OPTIONS",
}


def _code_from_class_name(name: str) -> str:
    stem = name[: -len("Error")] if name.endswith("Error") and name != "Error" else name
    return "SONIQ_" + re.sub(r"(?<!^)(?=[A-Z])", "_", stem).upper()


class SoniqError(Exception):
    """Base class of Soniq's own errors.

    Every error carries a stable `code` (``SONIQ_...``, safe to match on across releases) and,
    where there is one, a `suggestion` saying what to do. Subclasses get their code from
    their class name unless they set one; an instance may override both.
    """

    code: str = "SONIQ_ERROR"
    suggestion: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            cls.code = _CLASS_CODES.get(cls.__name__, _code_from_class_name(cls.__name__))

    def __init__(
        self,
        message: object = "",
        error_code: str | None = None,
        context: Mapping[str, Any] | None = None,
        suggestions: Sequence[str] | None = None,
        documentation_url: str | None = None,
        *,
        code: str | None = None,
        suggestion: str | None = None,
    ) -> None:
        # The positional order after `message` is 0.1.0's, so its ``SoniqError(msg, code, ...)`` calls still work.
        self.message = str(message)
        if code or error_code:
            self.code = str(code or error_code)
        listed = list(suggestions or [])
        if suggestion is not None:
            listed.insert(0, suggestion)
        if listed:
            self.suggestion = listed[0]
        self.context: dict[str, Any] = dict(context or {})
        self.documentation_url = documentation_url
        self._extra_suggestions = listed[1:]
        super().__init__(self._text(explicit=bool(listed)))

    def _text(self, *, explicit: bool) -> str:
        if explicit and self.suggestion and self.suggestion not in self.message:
            return f"{self.message}; {self.suggestion}" if self.message else self.suggestion
        return self.message

    @property
    def error_code(self) -> str:
        """0.1.0's name for `code`."""
        return self.code

    @property
    def suggestions(self) -> list[str]:
        """0.1.0's list form of `suggestion`."""
        head = [self.suggestion] if self.suggestion else []
        return head + list(getattr(self, "_extra_suggestions", []))


class SettingsError(SoniqError, ValueError):
    """A setting has a bad value; the message names the setting and its variable."""

    def __init__(self, name: str, message: str) -> None:
        self.setting = name
        self.env_var = f"SONIQ_{name.upper()}"
        super().__init__(f"{message} (setting '{name}', environment variable {self.env_var})")


class BackendNotFoundError(SoniqError, LookupError):
    """No installed backend serves a URL scheme."""

    suggestion = "install the distribution that serves the scheme, e.g. pip install soniq-postgres"


class BackendLoadError(SoniqError, ImportError):
    """A backend or observer entry point exists but could not be imported."""


class InvalidURLError(SoniqError, ValueError):
    """A database URL that cannot be parsed."""


class UnknownJobError(SoniqError, LookupError):
    """No job is registered under a name."""

    suggestion = (
        "register it with @app.job, or enqueue it with enqueue_validation='warn' or a TaskRef "
        "when another service runs it"
    )


class JobArgumentsError(SoniqError, TypeError):
    """Job arguments that cannot be stored: not JSON-serialisable, or too large."""


class BackendUnavailableError(SoniqError, ConnectionError):
    """The store cannot be reached; the message names where it was looked for."""

    suggestion = "check that the server is running and that the URL (SONIQ_DATABASE_URL) points at it"


class BackendProtocolError(SoniqError, TypeError):
    """A backend declares no `QueueStore`, a role version this soniq-core does not speak, or a role
    whose methods it lacks."""

    suggestion = "upgrade the backend distribution or soniq-core so both speak the same role versions"


class MissingBackendRoleError(SoniqError, NotImplementedError):
    """A feature needs an optional backend role the configured backend does not fill.

    `feature`, `role` and `backend` say which, so that a caller can fall back or report it."""

    suggestion = "use a backend that fills the role (the bundled PostgreSQL, SQLite and Redis backends fill them all)"

    def __init__(self, message: object = "", *, feature: str = "", role: str = "", backend: str = "") -> None:
        super().__init__(message)
        self.feature = feature
        self.role = role
        self.backend = backend


class NoJobsRegisteredError(SoniqError, RuntimeError):
    """A worker was started with no job registered (pass `allow_no_jobs=True` to start one anyway)."""


# -- dependencies, cancelling and waiting -------------------------------------------


class JobNotFoundError(SoniqError, LookupError):
    """No job row and no dead-letter row has the id (it never existed, or was deleted or pruned)."""

    def __init__(self, job_id: str, message: str | None = None) -> None:
        self.job_id = job_id
        super().__init__(message or f"no job has id {job_id!r}")


class UnknownDependencyError(SoniqError, LookupError):
    """`depends_on` names ids that no job, dead letter or earlier job of the same call has; nothing was stored."""

    suggestion = "pass the ids returned by enqueue; a job deleted by result_ttl=0 can no longer be depended on"

    SHOWN = 10
    """The message lists this many of the unknown ids and says how many more there are (all are in `missing`)."""

    def __init__(self, missing: Sequence[str]) -> None:
        self.missing = tuple(missing)
        listed = ", ".join(self.missing[: self.SHOWN])
        more = len(self.missing) - self.SHOWN
        tail = f" and {more:,} more" if more > 0 else ""
        super().__init__(f"depends_on names {len(self.missing):,} unknown job id(s): {listed}{tail}")


class DependencyCycleError(SoniqError, ValueError):
    """A job would wait for itself, directly or through other jobs; nothing was stored."""


class InvalidLimitError(SoniqError, ValueError):
    """A fleet-wide limit with a value that cannot be enforced: a count outside 1 to 1,000,000,000, a
    period outside 1 ms to 30 days or not whole milliseconds, an unknown unit (bounds in `soniq.limits`)."""

    suggestion = "see the limit bounds in docs/reliability.md"


class JobFailedError(SoniqError):
    """`wait_for`: the job was dead-lettered; `job` is its dead-letter row as a dict, `last_error` its error."""

    def __init__(self, job_id: str, last_error: str | None, job: Mapping[str, Any]) -> None:
        self.job_id = job_id
        self.last_error = last_error
        self.job = dict(job)
        reason = self.job.get("dead_letter_reason")
        super().__init__(f"job {job_id} failed ({reason}): {last_error}")


class JobCancelledError(SoniqError):
    """`wait_for`: the job was cancelled (by a request, or because a dependency failed)."""

    def __init__(self, job_id: str, last_error: str | None, job: Mapping[str, Any]) -> None:
        self.job_id = job_id
        self.last_error = last_error
        self.job = dict(job)
        super().__init__(f"job {job_id} was cancelled" + (f": {last_error}" if last_error else ""))


class SchemaStateError(SoniqError, RuntimeError):
    """The schema is one `setup` will not migrate (newer, mixed or unknown), or one that
    needs an explicit ``soniq setup`` first (0.1.0). Nothing was changed."""

    def __init__(self, family: SchemaFamily, message: str) -> None:
        self.family = family
        super().__init__(message)


class LegacyWorkersActiveError(SchemaStateError):
    """soniq 0.1.0 workers still heartbeat into the database being upgraded."""

    def __init__(self, count: int, seconds: float) -> None:
        from soniq.schema_state import SchemaFamily  # that module imports this one

        self.count = count
        super().__init__(
            SchemaFamily.LEGACY_010,
            f"{count} soniq 0.1.0 worker(s) heartbeated in the last {seconds:g}s, so the database is "
            "still in use; stop them (and back the database up) before upgrading, or run "
            "`soniq setup --force` to upgrade anyway (their in-flight jobs go to stale recovery)",
        )


class JobOptionsError(SoniqError, ValueError):
    """A queue name, priority, schedule or listing bound that Soniq does not accept."""


class ScheduleError(JobOptionsError):
    """A schedule option Soniq cannot use; `field` names it (``cron``, ``every``, ``timezone``...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ScheduleTypeError(ScheduleError, TypeError):
    """A schedule option of the wrong type, such as a cron expression that is not a string.

    Also a `TypeError`, which is what soniq 0.1.0 raised for these (``except TypeError`` keeps working).
    """


class DeadLetterNotFoundError(SoniqError, LookupError):
    """No dead-letter row has that id."""


class InvalidTaskNameError(SoniqError, ValueError):
    """A job name that does not match the app's `task_name_pattern`."""

    code = SONIQ_INVALID_TASK_NAME


class TaskArgsError(SoniqError, ValueError):
    """Arguments a `TaskRef`'s `args_model` does not accept; nothing was stored."""

    code = SONIQ_TASK_ARGS_INVALID


class UnknownSettingError(SoniqError, TypeError):
    """A keyword that is no setting of this Soniq nor of soniq 0.1.0."""

    code = SONIQ_UNKNOWN_SETTING


class UnsupportedSettingError(SoniqError, TypeError):
    """A soniq 0.1.0 setting that has no meaning here; the message says why and what to use."""

    code = SONIQ_UNSUPPORTED_SETTING


class BackendNameError(SoniqError, ValueError):
    """`backend=` names no known kind of store, or the URL in the settings is of another kind."""


class InvalidArgumentsError(SoniqError, Permanent):
    """The stored arguments failed the job's `args_model` in the worker: the row is dead-lettered at once."""

    dead_letter_reason = "invalid_arguments"


class JobStepError(SoniqError, ValueError):
    """`ctx.step` or `ctx.checkpoint` was given something it cannot store: a bad step name, a
    value that is not JSON, or JSON over `max_result_bytes`. Raised in the handler, so that run
    fails like any exception and nothing is written."""


class InvalidStepNameError(JobStepError):
    """A step name that is not a non-empty string of at most 200 characters without NUL or lone surrogates."""


class StepValueError(JobStepError):
    """A step result or checkpoint that is not JSON-serialisable (or holds what no store accepts)."""


class StepValueTooLargeError(StepValueError):
    """A step result or checkpoint whose JSON is over `max_result_bytes`."""

    suggestion = "store large values elsewhere and keep a reference in the step, or raise max_result_bytes"


class ProgressValueError(SoniqError, ValueError):
    """`ctx.progress` was given a value it cannot store: `done` or `total` not a finite number from
    0 up, `done` above `total`, or a message that is not text of at most 1,000 characters without
    NUL or lone surrogates. Raised in the handler, at the call; nothing is stored."""


class JobOwnershipLostError(SoniqError, RuntimeError):
    """A step or checkpoint could not be written because this worker no longer owns the job's row
    (stale recovery or a shutdown handed it back): the handler should stop; nothing was written."""


class JobUpgradeError(SoniqError, Permanent):
    """A claimed row's arguments could not be brought to the worker's version of the job: the row
    goes to the dead-letter table at once with `dead_letter_reason`."""

    dead_letter_reason = "upgrade_failed"


class NoUpgradePathError(JobUpgradeError):
    """The row's version is older than the job's upgrade chain reaches."""

    dead_letter_reason = "no_upgrade_path"


class UpgradeFailedError(JobUpgradeError):
    """An upgrade function raised, or returned something other than a JSON-ready dict."""

    dead_letter_reason = "upgrade_failed"


class InternalError(Exception):
    """Base of the exceptions core raises for its own control flow or a broken invariant, never
    for a caller's mistake: a worker transition the diagram lacks, a handler that would not stop,
    an unstorable result, a CLI failure reported as one line. Catch `SoniqError` instead."""
