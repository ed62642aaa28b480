"""``soniq keys rotate``: re-seal every stored sealed value with the newest key, in bounded pages.

Walks the rows the backend's `KeyRotationStore` finds, re-seals in core each envelope (arguments,
result) and sealed progress message that does not open with the newest key, and writes a row back
only if those values are still what was read (a worker that settled the row meanwhile wins, and the
row is counted as changed). A value no configured key opens is left as it is and reported; the
row's job, when it runs, goes to the dead-letter table with reason ``undecryptable``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from soniq.backend import KeyRotationStore, require_role
from soniq.backend.key_rotation_store import SEALED_MARKS
from soniq.encryption import Cipher, UndecryptableError, is_envelope, is_sealed_text
from soniq.params import ResealRowParams, SealedRowsParams

FEATURE = "rotating encryption keys (soniq keys rotate)"
DEFAULT_BATCH_SIZE = 500
MAX_BATCH_SIZE = 10_000
LISTED_UNDECRYPTABLE = 20
"""How many undecryptable rows a report names (it counts them all)."""


@dataclass
class RotationReport:
    """What one rotation did (or, with ``dry_run``, would do)."""

    rows_read: int = 0
    rows_resealed: int = 0
    values_resealed: int = 0
    rows_changed_meanwhile: int = 0
    undecryptable: int = 0
    undecryptable_rows: list[str] = field(default_factory=list)
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows_read": self.rows_read,
            "rows_resealed": self.rows_resealed,
            "values_resealed": self.values_resealed,
            "rows_changed_meanwhile": self.rows_changed_meanwhile,
            "undecryptable": self.undecryptable,
            "undecryptable_rows": list(self.undecryptable_rows),
            "dry_run": self.dry_run,
        }


def _resealed(cipher: Cipher, name: str, text: str | None) -> str | None:
    """The field's new JSON text, or None when it holds nothing to re-seal."""
    if text is None or not any(mark in text for mark in SEALED_MARKS):
        return None
    value = json.loads(text)
    if name == "progress_json":
        message = value.get("message") if isinstance(value, dict) else None
        if not is_sealed_text(message) or cipher.is_current(message):
            return None
        return json.dumps({**value, "message": cipher.reseal(message)}, separators=(",", ":"))
    if not is_envelope(value) or cipher.is_current(value):
        return None
    return json.dumps(cipher.reseal(value), separators=(",", ":"))


async def rotate_keys(
    backend: object,
    cipher: Cipher,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    pause: float = 0.0,
    dry_run: bool = False,
) -> RotationReport:
    """Re-seal every sealed value the store holds with the newest key (see the module's text)."""
    protocol: Any = KeyRotationStore  # a protocol class in the call trips mypy's type-abstract check
    store: KeyRotationStore = require_role(backend, protocol, FEATURE)
    report = RotationReport(dry_run=dry_run)
    cursor: str | None = None
    while True:
        page = await store.sealed_rows(SealedRowsParams(cursor=cursor, limit=batch_size))
        for row in page.rows:
            report.rows_read += 1
            changes: dict[str, tuple[str, str]] = {}
            try:
                for name in ("args_json", "result_json", "progress_json"):
                    old = getattr(row, name)
                    new = _resealed(cipher, name, old)
                    if new is not None:
                        changes[name] = (old, new)
            except UndecryptableError:
                report.undecryptable += 1
                if len(report.undecryptable_rows) < LISTED_UNDECRYPTABLE:
                    report.undecryptable_rows.append(f"{row.table}:{row.id}")
                continue
            if not changes:
                continue
            if dry_run or await store.reseal_row(ResealRowParams(table=row.table, id=row.id, **changes)):
                report.rows_resealed += 1
                report.values_resealed += len(changes)
            else:
                report.rows_changed_meanwhile += 1
        cursor = page.next_cursor
        if cursor is None:
            return report
        if pause > 0:
            await asyncio.sleep(pause)


__all__ = ["DEFAULT_BATCH_SIZE", "MAX_BATCH_SIZE", "RotationReport", "rotate_keys"]
