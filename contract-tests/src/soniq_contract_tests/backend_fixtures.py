"""What a backend package lends the suite for checks the protocol cannot make on its own.

Two checks need to reach past the protocol into the store: the corrupt-row contract writes args
that enqueue refuses, and the transactional-enqueue contract opens the caller's transaction. The
suite knows no store, so each backend package registers its own through the entry-point group
``soniq_contract_tests.fixtures``::

    [project.entry-points."soniq_contract_tests.fixtures"]
    mine = "soniq_mine.contract_fixtures"

The entry point names a module (or any object) with these attributes:

- ``backend_class``: the backend class it serves, or its dotted name ``"soniq_mine.backend:MineBackend"``
  (a string is matched without importing anything). It also serves subclasses; the most specific
  registration wins.
- ``corrupt_row`` (optional): ``async (backend, job_id, raw_args: str) -> None``, overwrites the stored
  args of an existing queued row with that raw text (`soniq_contract_tests.CorruptRowWriter`).
- ``transaction`` (optional): ``(backend) -> async context manager`` yielding a driver connection to
  the same store inside an open transaction, committing on a clean exit and rolling back on an error
  (`soniq_contract_tests.TransactionFactory`). Only for a backend with `transactional_enqueue`.

Both take the backend under test (connected, set up, in the test's namespace), so they find the
store from it, whichever factory built it. Entry points are read lazily, the first time a suite
test asks, and a registration that fails to load is reported in the test that needed it. A class
form can still override the fixtures `soniq_corrupt_row` and `soniq_transaction` directly.
`register_contract_fixtures` adds a registration in this process (ahead of the entry points).
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

FIXTURES_GROUP = "soniq_contract_tests.fixtures"

CorruptRowWriter = Callable[[Any, str, str], Awaitable[None]]
"""``await writer(backend, job_id, raw_args)``: the stored args of that queued row become `raw_args`, verbatim."""

TransactionFactory = Callable[[Any], AbstractAsyncContextManager[Any]]
"""Given the backend under test (connected and set up in its namespace), opens a driver
connection to the same store, begins a transaction and yields that connection; commits when the
block exits normally and rolls back when it raises. The suite passes what it yields as
`EnqueueJobsParams.connection`."""


@dataclass(frozen=True)
class ContractFixtures:
    """One registration: the backend class it serves and what it lends the suite."""

    source: str
    """Where it came from: ``entry point NAME (VALUE)`` or ``registered in this process``."""
    backend_class: type[Any] | str
    corrupt_row: CorruptRowWriter | None = None
    transaction: TransactionFactory | None = None

    def serves(self, backend_type: type[Any]) -> int | None:
        """How close `backend_type` is to the class served (0: that class; n: its n-th base), or None."""
        for distance, kind in enumerate(backend_type.__mro__):
            if isinstance(self.backend_class, str):
                if self.backend_class in (
                    f"{kind.__module__}:{kind.__qualname__}",
                    f"{kind.__module__}.{kind.__qualname__}",
                ):
                    return distance
            elif kind is self.backend_class:
                return distance
        return None


class BrokenRegistrationError(RuntimeError):
    """An entry point of the fixtures group failed to load or has no `backend_class`."""


_in_process: list[ContractFixtures] = []


def register_contract_fixtures(
    backend_class: type[Any] | str,
    *,
    corrupt_row: CorruptRowWriter | None = None,
    transaction: TransactionFactory | None = None,
) -> ContractFixtures:
    """Register fixtures for `backend_class` in this process, ahead of the entry points."""
    registration = ContractFixtures("registered in this process", backend_class, corrupt_row, transaction)
    _in_process.insert(0, registration)
    return registration


def unregister_contract_fixtures(registration: ContractFixtures) -> None:
    if registration in _in_process:
        _in_process.remove(registration)


def from_object(source: str, value: object) -> ContractFixtures:
    """A registration read off a loaded entry point (a module or any object with the attributes)."""
    backend_class = getattr(value, "backend_class", None)
    if not isinstance(backend_class, type | str):
        raise BrokenRegistrationError(
            f"{source} has no backend_class (the backend class it serves, or its dotted name 'module:Class')"
        )
    return ContractFixtures(
        source,
        backend_class,
        corrupt_row=getattr(value, "corrupt_row", None),
        transaction=getattr(value, "transaction", None),
    )


@functools.cache
def _entry_point_registrations() -> tuple[tuple[ContractFixtures, ...], tuple[str, ...]]:
    found: list[ContractFixtures] = []
    broken: list[str] = []
    for entry_point in importlib.metadata.entry_points(group=FIXTURES_GROUP):
        source = f"entry point {entry_point.name} ({entry_point.value}) of group {FIXTURES_GROUP}"
        try:
            found.append(from_object(source, entry_point.load()))
        except Exception as exc:  # one broken package must not hide the others
            broken.append(f"{source}: {type(exc).__name__}: {exc}")
    return tuple(found), tuple(broken)


def registrations() -> list[ContractFixtures]:
    """Every registration: this process's first, then the entry points'."""
    return [*_in_process, *_entry_point_registrations()[0]]


def fixtures_for(backend: object) -> ContractFixtures | None:
    """The registration serving `backend`'s class most closely, or None (see `fixtures_for_class`)."""
    return fixtures_for_class(type(backend))


def fixtures_for_class(backend_type: type[Any]) -> ContractFixtures | None:
    """The registration serving `backend_type` most closely, or None.

    Raises `BrokenRegistrationError` when none serves it and some entry point failed to load (it
    may have been this backend's)."""
    best: tuple[int, ContractFixtures] | None = None
    for registration in registrations():
        distance = registration.serves(backend_type)
        if distance is not None and (best is None or distance < best[0]):
            best = (distance, registration)
    if best is not None:
        return best[1]
    broken = _entry_point_registrations()[1]
    if broken:
        raise BrokenRegistrationError("; ".join(broken))
    return None
