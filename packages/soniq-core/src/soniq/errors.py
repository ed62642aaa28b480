"""Every exception Soniq raises on purpose derives from `SoniqError`."""

from __future__ import annotations

from soniq.snooze import Snooze as Snooze  # defined in soniq.snooze; importable from here as before


class SoniqError(Exception):
    """Base class of Soniq's own errors."""


class SettingsError(SoniqError, ValueError):
    """A setting has a bad value; the message names the setting and its variable."""

    def __init__(self, name: str, message: str) -> None:
        self.setting = name
        self.env_var = f"SONIQ_{name.upper()}"
        super().__init__(f"{message} (setting '{name}', environment variable {self.env_var})")


class BackendNotFoundError(SoniqError, LookupError):
    """No installed backend serves a URL scheme."""


class BackendLoadError(SoniqError, ImportError):
    """A backend or observer entry point exists but could not be imported."""


class InvalidURLError(SoniqError, ValueError):
    """A database URL that cannot be parsed."""


class UnknownJobError(SoniqError, LookupError):
    """No job is registered under a name."""


class JobArgumentsError(SoniqError, TypeError):
    """Job arguments that cannot be stored: not JSON-serialisable, or too large."""


class BackendUnavailableError(SoniqError, ConnectionError):
    """The store cannot be reached; the message names where it was looked for."""


class BackendProtocolError(SoniqError, TypeError):
    """A backend declares a protocol version this soniq-core does not speak."""


SNOOZE_MAX_SECONDS = 30 * 86400.0
"""The longest a `Snooze` puts a job off (30 days) unless the app sets `snooze_max_seconds`."""


class NoJobsRegisteredError(SoniqError, RuntimeError):
    """A worker was started with no job registered (pass `allow_no_jobs=True` to start one anyway)."""


class Permanent(SoniqError):  # noqa: N818 - raised by handlers, reads as an instruction
    """Raise from a handler to give the job up now: it moves to the dead-letter table with
    reason ``non_retryable`` whatever retries it has left. ``raise Permanent("why") from exc``
    keeps the original error's traceback in `last_error`."""
