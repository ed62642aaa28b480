"""The Redis URL, the accepted options, and how driver failures surface.

A server that cannot be reached, or a connection that drops mid-operation,
surfaces as `BackendUnavailableError` naming ``host:port``. The client is
built without redis-py's automatic retries: a script whose reply was lost may
already have run (a claim, say), and running it again would claim twice.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from soniq.backend import redact_text, redact_url
from soniq.backend.options import parse_bool
from soniq.errors import BackendUnavailableError, InvalidURLError, SoniqError, UnknownDependencyError
from soniq_redis.cluster import cluster_client

SCHEMES = ("redis", "rediss")
CLUSTER_SUFFIX = "cluster"
"""``redis+cluster://`` and ``rediss+cluster://`` talk to a Redis Cluster (see soniq_redis.cluster)."""
DEFAULT_PORT = 6379

# Options `from_url` accepts beside the URL, with their defaults. Each is also
# a URL query parameter (a keyword wins); they are removed from the URL before
# it reaches redis-py, which keeps every other parameter (``ssl_cert_reqs``...).
ACCEPTED_OPTIONS: Mapping[str, Any] = {
    "namespace": None,
    "max_connections": None,
    "socket_timeout": None,
    "socket_connect_timeout": 5.0,
    "client_name": None,
    "cluster": None,
}
_OPTION_TYPES: Mapping[str, Any] = {
    "namespace": str,
    "max_connections": int,
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "client_name": str,
    "cluster": lambda value: parse_bool("cluster", value),
}


class StatusRejectedError(SoniqError, ValueError):
    """A script refused to write a status outside the allowed set."""


class DuplicateJobError(SoniqError, ValueError):
    """An insert named a job id that already exists."""


TLS_HINT = (
    "; this is a rediss:// (TLS) URL: a TLS handshake with a server that does not speak TLS "
    "never completes, which is the likely cause (use redis:// for a plain server, or the server's TLS port)"
)


@dataclass(frozen=True, slots=True, repr=False)
class RedisTarget:
    """A parsed ``redis://`` or ``rediss://`` URL and the options for the client."""

    url: str
    host: str
    port: int
    db: int
    tls: bool
    options: Mapping[str, Any] = field(default_factory=dict)
    cluster: bool = False
    """A Redis Cluster: redis-py's cluster client, every namespace in one hash slot."""

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        # Reprs end up in tracebacks and error trackers: never with the password.
        shown = f"RedisTarget({redact_url(self.url)!r}, db={self.db}, tls={self.tls}"
        return shown + (", cluster=True)" if self.cluster else ")")

    @classmethod
    def parse(cls, url: str, options: Mapping[str, Any]) -> RedisTarget:
        unknown = sorted(set(options) - set(ACCEPTED_OPTIONS))
        if unknown:
            raise TypeError(
                f"unknown option(s) for the Redis backend: {', '.join(unknown)}; "
                f"accepted options: {', '.join(ACCEPTED_OPTIONS)}"
            )
        try:
            parts = urlsplit(url)
            port = parts.port or DEFAULT_PORT
        except ValueError as exc:
            raise InvalidURLError(f"invalid Redis URL {redact_url(url)!r}: {redact_text(str(exc))}") from None
        scheme, _, suffix = parts.scheme.lower().partition("+")
        if scheme not in SCHEMES or suffix not in ("", CLUSTER_SUFFIX):
            raise InvalidURLError(
                f"invalid Redis URL {redact_url(url)!r}: expected redis://host:port/db, rediss://, "
                "or redis+cluster://host:port for a Redis Cluster"
            )
        path = parts.path.strip("/")
        try:
            db = int(path) if path else 0
        except ValueError:
            raise InvalidURLError(
                f"invalid Redis URL {redact_url(url)!r}: the path must be a database number"
            ) from None
        from_query: dict[str, Any] = {}
        kept: list[tuple[str, str]] = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key not in _OPTION_TYPES:
                kept.append((key, value))
                continue
            try:
                from_query[key] = _OPTION_TYPES[key](value)
            except ValueError:
                kind = "true or false" if key == "cluster" else f"a {_OPTION_TYPES[key].__name__}"
                raise InvalidURLError(
                    f"invalid Redis URL {redact_url(url)!r}: option {key}={value!r} must be {kind}"
                ) from None
        merged = {**ACCEPTED_OPTIONS, **from_query, **options}
        cluster = _cluster_mode(url, suffix == CLUSTER_SUFFIX, merged["cluster"], db)
        return cls(
            url=urlunsplit(parts._replace(scheme=scheme, query=urlencode(kept))),
            host=parts.hostname or "localhost",
            port=port,
            db=db,
            tls=scheme == "rediss",
            options=merged,
            cluster=cluster,
        )

    def client(self) -> Redis:
        kwargs: dict[str, Any] = {
            "decode_responses": True,
            # Lone surrogates in queue or job names survive the round trip.
            "encoding_errors": "surrogatepass",
            "retry": Retry(NoBackoff(), 0),
            # RESP2: redis-py then checks a pooled connection on checkout and
            # replaces one the server closed (after a restart, say) instead of
            # failing the next command on it; its RESP3 default skips that check.
            "protocol": 2,
            "socket_connect_timeout": self.options["socket_connect_timeout"],
        }
        for name in ("max_connections", "socket_timeout", "client_name"):
            if self.options[name] is not None:
                kwargs[name] = self.options[name]
        if self.cluster:
            return cluster_client(self.url, kwargs)
        return Redis.from_url(self.url, **kwargs)


def _cluster_mode(url: str, by_scheme: bool, option: Any, db: int) -> bool:
    """Cluster or not, from the scheme and the `cluster` option; refuse a URL that says both."""
    if option is not None and not isinstance(option, bool):
        option = parse_bool("cluster", option)
    if by_scheme and option is False:
        raise InvalidURLError(
            f"Redis URL {redact_url(url)!r} names two modes: the redis+cluster:// scheme asks for a Redis "
            "Cluster and cluster=false for a single server; drop one"
        )
    cluster = by_scheme or option is True
    if cluster and db != 0:
        raise InvalidURLError(
            f"Redis URL {redact_url(url)!r}: a Redis Cluster has only database 0, the URL names database {db}; "
            "separate applications with namespace= instead"
        )
    return cluster


def is_connection_failure(exc: BaseException) -> bool:
    return isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError))


def _timed_out(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, (RedisTimeoutError, TimeoutError)) or "timeout" in text or "timed out" in text


@contextlib.contextmanager
def translated_errors(target: RedisTarget, *, connecting: bool = False) -> Iterator[None]:
    """Driver errors as Soniq errors: unreachable server, refused status, duplicate id.

    With `connecting`, a TLS target that times out (or fails its handshake) says why that
    usually happens, instead of a bare "Timeout"."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        hint = TLS_HINT if connecting and target.tls and (_timed_out(exc) or "ssl" in str(exc).lower()) else ""
        raise BackendUnavailableError(f"Redis at {target.where} is unavailable: {redact_text(str(exc))}{hint}") from exc
    except ResponseError as exc:
        message = str(exc)
        if message.startswith("SONIQ_STATUS"):
            raise StatusRejectedError(_script_message(message)) from exc
        if message.startswith("SONIQ_DUPLICATE"):
            raise DuplicateJobError(_script_message(message)) from exc
        if message.startswith("SONIQ_UNKNOWN_DEPENDENCY "):
            raise UnknownDependencyError(_json_payload(message)) from exc
        raise


def _json_payload(message: str) -> list[str]:
    """The JSON list a script put after its error code (``SONIQ_CODE [...]``)."""
    text = message.split(" ", 1)[1]
    value, _ = json.JSONDecoder().raw_decode(text)
    return [str(item) for item in value]


def _script_message(message: str) -> str:
    """The text a script raised, without Redis' code and script location."""
    text = message.split(" ", 1)[1] if " " in message else message
    return text.split(" script: ", 1)[0]
