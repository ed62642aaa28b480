"""``soniq-contract-tests URL [pytest args]``: the URL form of the suite as a command."""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: soniq-contract-tests URL [PYTEST ARGS...]

Run the Soniq backend contract suite against the backend that URL's scheme
resolves to (entry-point group soniq.backends). Any further arguments go to
pytest unchanged, e.g.:

  soniq-contract-tests postgresql://postgres@127.0.0.1:5432/test -x -q
  soniq-contract-tests memory:// -k nack --soniq-option some_option=1
"""


def main(argv: Sequence[str] | None = None) -> int:
    import pytest

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        stream = sys.stdout if args else sys.stderr
        stream.write(USAGE)
        return 0 if args else 2
    url, rest = args[0], args[1:]
    if url.startswith("-"):
        sys.stderr.write(f"soniq-contract-tests: the first argument must be the backend URL, got {url!r}\n\n{USAGE}")
        return 2
    return int(pytest.main(["--pyargs", "soniq_contract_tests", "--soniq-url", url, *rest]))


if __name__ == "__main__":
    raise SystemExit(main())
