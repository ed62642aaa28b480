"""Moved to `soniq_contract_tests.chaos.scenarios`; this name stays for existing imports."""

from __future__ import annotations

from soniq_contract_tests.chaos.scenarios import (
    Namespace,
    TcpProxy,
    check_bad_arguments,
    check_bad_handlers,
    one_error_line,
)

__all__ = ["Namespace", "TcpProxy", "check_bad_arguments", "check_bad_handlers", "one_error_line"]
