"""Hypothesis-drawn inputs for the async contract tests: draw first, then run every value.

The contract tests are ``async def``s run on one event loop, which Hypothesis's ``@given`` cannot
drive; so a test asks for a list of examples (the fixed ones first, then `EXAMPLES` drawn ones)
and tries each on the backend under test, naming the value in every failure message.
"""

from __future__ import annotations

from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

T = TypeVar("T")

EXAMPLES = 10
"""Values drawn per strategy on top of the fixed ones: enough variety, a second or two a backend."""


def draw(strategy: st.SearchStrategy[T], fixed: list[T] | None = None, *, examples: int = EXAMPLES) -> list[T]:
    """The fixed values, then up to `examples` values the strategy draws."""
    drawn: list[T] = list(fixed or [])

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(value=strategy)
    def collect(value: T) -> None:
        drawn.append(value)

    collect()
    return drawn


def storable_text(*, min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    """Text every store holds as it is: no NUL, no lone surrogate, any other character."""
    return st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        min_size=min_size,
        max_size=max_size,
    )


def json_values() -> st.SearchStrategy[Any]:
    """JSON values that round-trip exactly: null, booleans, integers, text, lists and objects of them."""
    leaves: st.SearchStrategy[Any] = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**53), max_value=2**53),
        storable_text(max_size=20),
    )

    def nest(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.lists(children, max_size=4), st.dictionaries(storable_text(max_size=10), children, max_size=4)
        )

    return st.recursive(leaves, nest, max_leaves=12)


def plain_names(*, min_size: int = 1, max_size: int = 12) -> st.SearchStrategy[str]:
    """Lower-case letters and digits: names every store orders the same way as Python does."""
    return st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=min_size, max_size=max_size)
