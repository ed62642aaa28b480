"""Backend options: the URL, its Soniq-specific query parameters, and keywords.

Soniq's own parameters are removed from the URL before it reaches asyncpg.
Any other query parameter must be a connection parameter asyncpg reads
itself: asyncpg would send an unknown one to the server as a session
setting, so a typo (``?poolsize=3``) would fail far from its cause, or not
at all. A keyword given to `from_url` wins over the same parameter in the URL.
Every message that shows the URL masks its password.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from soniq.backend import redact_text, redact_url
from soniq.backend.options import parse_bool
from soniq.errors import InvalidURLError

DEFAULT_SCHEMA = "public"
BASE_CHANNEL = "soniq_new_job"
CHANGES_CHANNEL = "soniq_job_change"
DEFAULT_MAX_SIZE = 10
DEFAULT_MIN_SIZE = 1
DEFAULT_CONNECT_TIMEOUT = 10.0

# PostgreSQL truncates identifiers (and rejects channel names) at 63 bytes.
_MAX_IDENTIFIER = 63
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# keyword option -> URL query parameter
_URL_PARAMETERS: dict[str, str] = {
    "namespace": "namespace",
    "min_size": "pool_min_size",
    "max_size": "pool_max_size",
    "listen": "listen",
    "statement_cache_size": "statement_cache_size",
    "connect_timeout": "connect_timeout",
    # scale-out: poolers in front of PostgreSQL (see soniq_postgres.pooling)
    "pooling": "pooling",
    "listen_url": "listen_url",
}
POOLING_MODES: tuple[str, ...] = ("auto", "direct", "transaction")
ACCEPTED_OPTIONS: tuple[str, ...] = tuple(_URL_PARAMETERS)
# The libpq-style parameters asyncpg's DSN parser consumes (asyncpg 0.29-0.31).
CONNECTION_PARAMETERS: tuple[str, ...] = (
    "host",
    "port",
    "dbname",
    "database",
    "user",
    "password",
    "passfile",
    "service",
    "servicefile",
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "sslnegotiation",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "target_session_attrs",
    "krbsrvname",
    "gsslib",
)


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """Everything a `PostgresBackend` needs to open its connections."""

    dsn: str
    """The URL handed to asyncpg, without Soniq's parameters."""
    host: str
    port: int
    database: str
    user: str
    schema: str
    min_size: int
    max_size: int
    max_size_explicit: bool
    """False when the pool size is the default, which `prepare_worker` may grow."""
    listen: bool
    statement_cache_size: int
    connect_timeout: float
    pooling: str = "auto"
    """``auto`` (probe at connect), ``direct`` or ``transaction`` (a pooler such as PgBouncer)."""
    listen_dsn: str | None = None
    """A direct connection for LISTEN when the main URL goes through a transaction pooler."""
    listen_explicit: bool = False
    statement_cache_explicit: bool = False
    transaction_pooled: bool = False
    """Set once `pooling` is resolved: the URL reaches PostgreSQL through a transaction pooler."""

    def __repr__(self) -> str:
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        values["dsn"] = redact_url(self.dsn)
        if self.listen_dsn is not None:
            values["listen_dsn"] = redact_url(self.listen_dsn)
        shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
        return f"PostgresOptions({shown})"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel: `soniq_new_job`, suffixed by the namespace."""
        return _namespaced(BASE_CHANNEL, self.schema)

    @property
    def changes_channel(self) -> str:
        """The channel of job changes: a watched row finished, or a cancel was requested.
        Its payload is the job id; it shares the LISTEN connection with `channel`."""
        return _namespaced(CHANGES_CHANNEL, self.schema)

    @property
    def application_name(self) -> str:
        """Shown in `pg_stat_activity`, so operators can tell Soniq's connections apart."""
        name = "soniq" if self.schema == DEFAULT_SCHEMA else f"soniq/{self.schema}"
        return name[:_MAX_IDENTIFIER]

    @property
    def listen_application_name(self) -> str:
        name = "soniq-listen" if self.schema == DEFAULT_SCHEMA else f"soniq-listen/{self.schema}"
        return name[:_MAX_IDENTIFIER]


def _namespaced(base: str, schema: str) -> str:
    if schema == DEFAULT_SCHEMA:
        return base
    candidate = f"{base}_{schema}"
    if len(candidate) <= _MAX_IDENTIFIER:
        return candidate
    digest = hashlib.sha1(schema.encode()).hexdigest()[:16]
    return f"{base}_{digest}"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _int(option: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"option '{option}' expects a whole number, got {value!r}")
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ValueError(f"option '{option}' expects a whole number, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"option '{option}' must be at least {minimum}, got {value!r}")
    return number


def _float(option: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"option '{option}' expects a number of seconds, got {value!r}") from None
    if not number > 0:
        raise ValueError(f"option '{option}' must be greater than 0, got {value!r}")
    return number


def _schema(value: Any) -> str:
    if value is None or value == "":
        return DEFAULT_SCHEMA
    if not isinstance(value, str) or not _SCHEMA_NAME.match(value) or len(value) > _MAX_IDENTIFIER:
        raise ValueError(
            f"option 'namespace' must be a PostgreSQL schema name of letters, digits and underscores "
            f"(at most {_MAX_IDENTIFIER} characters, not starting with a digit), got {value!r}"
        )
    return value


def parse_options(url: str, options: Mapping[str, Any]) -> PostgresOptions:
    """Validate the URL and the keywords; raise `TypeError` for an unknown keyword."""
    unknown = sorted(set(options) - set(ACCEPTED_OPTIONS))
    if unknown:
        raise TypeError(
            f"unknown option(s) for the PostgreSQL backend: {', '.join(unknown)}; "
            f"accepted options: {', '.join(ACCEPTED_OPTIONS)}"
        )
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise InvalidURLError(f"invalid PostgreSQL URL {shown!r}: {redact_text(str(exc))}") from None
    scheme = parts.scheme.split("+", 1)[0].lower()
    if scheme not in ("postgresql", "postgres"):
        raise InvalidURLError(f"not a PostgreSQL URL (expected postgresql://...): {shown!r}")

    query = parse_qsl(parts.query, keep_blank_values=True)
    unknown_parameters = sorted(
        {name for name, _ in query} - set(_URL_PARAMETERS.values()) - set(CONNECTION_PARAMETERS)
    )
    if unknown_parameters:
        raise InvalidURLError(
            f"unknown query parameter(s) in PostgreSQL URL {shown!r}: {', '.join(unknown_parameters)}; "
            f"Soniq's options are {', '.join(_URL_PARAMETERS.values())}, and asyncpg reads "
            f"{', '.join(CONNECTION_PARAMETERS)} (server settings belong in the server's or role's configuration)"
        )
    ours = {name: value for name, value in query if name in _URL_PARAMETERS.values()}
    kept = [(name, value) for name, value in query if name not in _URL_PARAMETERS.values()]
    raw: dict[str, Any] = {}
    for option, parameter in _URL_PARAMETERS.items():
        if option in options:
            raw[option] = options[option]
        elif parameter in ours:
            raw[option] = ours[parameter]

    try:
        schema = _schema(raw.get("namespace"))
        max_size = _int("max_size", raw["max_size"], minimum=1) if "max_size" in raw else DEFAULT_MAX_SIZE
        min_size = _int("min_size", raw["min_size"], minimum=0) if "min_size" in raw else None
        listen = parse_bool("listen", raw["listen"]) if "listen" in raw else True
        cache = _int("statement_cache_size", raw.get("statement_cache_size", 100), minimum=0)
        timeout = _float("connect_timeout", raw.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
        pooling = _pooling(raw.get("pooling", "auto"))
        listen_dsn = _listen_dsn(raw.get("listen_url"))
    except ValueError as exc:
        raise InvalidURLError(f"{exc} (PostgreSQL URL {shown!r})") from None
    _check_wakeup_modes(pooling=pooling, listen=listen, listen_explicit="listen" in raw, listen_dsn=listen_dsn)
    if min_size is None:
        min_size = min(DEFAULT_MIN_SIZE, max_size)
    if min_size > max_size:
        raise InvalidURLError(f"option 'min_size' ({min_size}) must not exceed 'max_size' ({max_size})")

    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(kept), parts.fragment))
    host, port = _address(parts, dict(kept))
    return PostgresOptions(
        dsn=dsn,
        host=host,
        port=port,
        database=parts.path.lstrip("/") or os.environ.get("PGDATABASE", "") or (parts.username or ""),
        user=parts.username or os.environ.get("PGUSER", ""),
        schema=schema,
        min_size=min_size,
        max_size=max_size,
        max_size_explicit="max_size" in raw,
        listen=listen,
        statement_cache_size=cache,
        connect_timeout=timeout,
        pooling=pooling,
        listen_dsn=listen_dsn,
        listen_explicit="listen" in raw,
        statement_cache_explicit="statement_cache_size" in raw,
        transaction_pooled=pooling == "transaction",
    )


def _pooling(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in POOLING_MODES:
        raise ValueError(f"option 'pooling' expects one of {', '.join(POOLING_MODES)}, got {value!r}")
    return text


def _listen_dsn(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"option 'listen_url' expects a postgresql:// URL, got {type(value).__name__}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise ValueError(f"option 'listen_url' is not a valid URL ({redact_text(str(exc))})") from None
    if parts.scheme.split("+", 1)[0].lower() not in ("postgresql", "postgres"):
        raise ValueError(f"option 'listen_url' expects a postgresql:// URL, got {redact_url(value)!r}")
    return urlunsplit(("postgresql", parts.netloc, parts.path, parts.query, parts.fragment))


def _check_wakeup_modes(*, pooling: str, listen: bool, listen_explicit: bool, listen_dsn: str | None) -> None:
    """Refuse option sets that ask for two wake-up modes at once."""
    if listen_dsn is not None and not listen:
        raise InvalidURLError(
            "options 'listen_url' and 'listen=false' contradict each other: listen_url names a connection "
            "for LISTEN, listen=false turns LISTEN off; drop one"
        )
    if pooling == "transaction" and listen_explicit and listen and listen_dsn is None:
        raise InvalidURLError(
            "options 'pooling=transaction' and 'listen=true' contradict each other: a transaction pooler "
            "cannot hold a LISTEN; give listen_url= (a direct connection to PostgreSQL for wake-ups), "
            "or drop listen=true to poll"
        )


def _address(parts: SplitResult, query: Mapping[str, str]) -> tuple[str, int]:
    """Where the URL points, for error messages; mirrors libpq's defaults."""
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or query.get("host") or os.environ.get("PGHOST") or "localhost"
    if port is None:
        port = int(query.get("port") or os.environ.get("PGPORT") or 5432)
    return host, port
