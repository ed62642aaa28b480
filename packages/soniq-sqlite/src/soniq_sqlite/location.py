"""Where a `sqlite://` URL points: a file (plus its namespace sibling) or memory."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from soniq.backend import redact_url
from soniq.errors import InvalidURLError

MEMORY = ":memory:"
_NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,62}$")
_SCHEMES = ("sqlite", "sqlite+aiosqlite")


@dataclass(frozen=True, slots=True)
class DatabaseLocation:
    """The database a backend opens: an absolute file path, or `:memory:`."""

    path: Path | None
    """None for an in-memory database."""

    @property
    def is_memory(self) -> bool:
        return self.path is None

    @property
    def target(self) -> str:
        """What `sqlite3.connect` is given."""
        return MEMORY if self.path is None else str(self.path)

    def describe(self) -> str:
        """How error messages name this database."""
        return "the in-memory SQLite database" if self.path is None else f"SQLite database file {self.path}"


def parse_sqlite_url(url: str, accepted: tuple[str, ...] = ()) -> tuple[DatabaseLocation, dict[str, str]]:
    """Read ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or ``sqlite:///:memory:``,
    and the query parameters named in `accepted` (any other is an error).

    As in SQLAlchemy, three slashes mean a path relative to the working
    directory (resolved now, so a later ``chdir`` does not move the queue) and
    four an absolute path. ``sqlite://`` alone is the in-memory database.
    """
    shown = redact_url(url) if isinstance(url, str) else url
    try:
        parts = urlsplit(url)
    except (TypeError, ValueError) as exc:
        raise InvalidURLError(f"invalid SQLite URL {shown!r}: {exc}") from None
    url = shown
    if parts.scheme.lower() not in _SCHEMES:
        raise InvalidURLError(f"invalid SQLite URL {url!r}: the scheme must be 'sqlite' (e.g. sqlite:///soniq.db)")
    if parts.netloc:
        raise InvalidURLError(
            f"invalid SQLite URL {url!r}: a SQLite URL has no host; use sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    if parts.fragment:
        raise InvalidURLError(f"invalid SQLite URL {url!r}: a SQLite URL has no #fragment")
    query = parse_qsl(parts.query, keep_blank_values=True)
    unknown = sorted({name for name, _ in query} - set(accepted))
    if unknown:
        raise InvalidURLError(
            f"invalid SQLite URL {url!r}: unknown option(s) {', '.join(unknown)}; "
            f"accepted options: {', '.join(accepted) or 'none'}"
        )
    options = dict(query)
    raw = unquote(parts.path)
    if raw in ("", "/", "/" + MEMORY):
        if raw == "/":
            raise InvalidURLError(f"invalid SQLite URL {url!r}: it names no file (expected e.g. sqlite:///soniq.db)")
        return DatabaseLocation(path=None), options
    relative = raw[1:]
    path = Path(relative)
    if not path.is_absolute():
        path = Path.cwd() / path
    if relative.endswith("/"):
        raise InvalidURLError(f"invalid SQLite URL {url!r}: {path} is a directory, not a database file")
    return DatabaseLocation(path=path), options


def validate_namespace(namespace: str | None) -> str | None:
    if namespace is None:
        return None
    if not isinstance(namespace, str) or not _NAMESPACE_PATTERN.match(namespace):
        raise ValueError(
            f"invalid SQLite namespace {namespace!r}: use 1-63 letters, digits, '_' or '-' "
            "(it becomes part of a file name)"
        )
    return namespace


def namespaced(location: DatabaseLocation, namespace: str | None) -> DatabaseLocation:
    """The sibling file that holds a namespace: ``soniq.db`` + ``x`` gives ``soniq.x.db``.

    An in-memory database is private to its backend instance already, so the
    namespace changes nothing there.
    """
    if namespace is None or location.path is None:
        return location
    path = location.path
    name = f"{path.stem}.{namespace}{path.suffix}" if path.suffix else f"{path.name}.{namespace}"
    return DatabaseLocation(path=path.with_name(name))
