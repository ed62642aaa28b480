"""Every exception Soniq raises on purpose derives from `SoniqError`."""

from __future__ import annotations


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


class Permanent(SoniqError):  # noqa: N818 - raised by handlers, reads as an instruction
    """Raise from a handler to dead-letter the job at once (reason ``non_retryable``), with no retry."""


class Snooze(Exception):  # noqa: N818 - raised by handlers, reads as an instruction
    """Raise from a handler to run the job again later without spending an attempt."""

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("Snooze seconds must be >= 0")
        self.seconds = float(seconds)
        super().__init__(f"snoozed for {self.seconds:g}s")
