"""`CallShape`: enqueue's set-based check of keyword arguments agrees with `Signature.bind`."""

from __future__ import annotations

import inspect

from hypothesis import given
from hypothesis import strategies as st

from soniq.registry import CallShape

NAMES = ("a", "b", "c", "d", "e")
KINDS = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


@st.composite
def signatures(draw: st.DrawFn) -> inspect.Signature:
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=5))
    kinds = sorted(draw(st.lists(st.sampled_from(KINDS), min_size=len(names), max_size=len(names))))
    parameters: list[inspect.Parameter] = []
    seen_default = {kind: False for kind in KINDS}
    for name, kind in zip(names, kinds, strict=True):
        # Python's rule: after a positional parameter with a default, every positional one has one.
        positional = kind is not inspect.Parameter.KEYWORD_ONLY
        needs_default = positional and any(seen_default[k] for k in KINDS[:2])
        default = 0 if needs_default or draw(st.booleans()) else inspect.Parameter.empty
        if default is not inspect.Parameter.empty and positional:
            seen_default[kind] = True
        parameters.append(inspect.Parameter(name, kind, default=default))
    if draw(st.booleans()):
        parameters.append(inspect.Parameter("rest", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(parameters)


@given(signature=signatures(), given_names=st.lists(st.sampled_from((*NAMES, "z")), unique=True))
def test_a_fitting_call_binds_and_a_binding_call_fits(signature: inspect.Signature, given_names: list[str]) -> None:
    kwargs = dict.fromkeys(given_names, 1)
    shape = CallShape.of(signature)
    try:
        signature.bind(**kwargs)
        binds = True
    except TypeError:
        binds = False
    if shape.fits(kwargs):
        assert binds, (signature, kwargs)
    elif shape.usable:
        assert not binds, (signature, kwargs)
