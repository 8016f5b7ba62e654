"""The pydantic codec writes the same text as the hand-written one it replaced, and reads what it wrote.

The oracle is the old module, kept as tests/support/legacy_codec.py. For every record type the store
persists (checked against store.py below), generated values must encode to the legacy text, and the
legacy text must decode to an equal value (and the other way round, so a downgrade reads new rows too).
A database written through the store with the legacy codec is read by the new store in
tests/integration/test_store_compat.py.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectcore.consent import Card
from connectcore.control import Act
from connectcore.delivery import Message
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.grants import Principal, Scope, TokenRecord
from connectcore.restart import RestartRecord, RestartStep
from connectd.store import codec
from tests.support import legacy_codec as legacy

STORED: dict[str, Any] = {
    "Principal": Principal,
    "TokenRecord": TokenRecord,
    "frozenset[Scope]": frozenset[Scope],
    "Message": Message,
    "Card": Card,
    "RestartRecord": RestartRecord,
    "Act": Act,
}
# Types first stored after the hand-written codec was gone (federation's outbox and inbox): there is no
# legacy text to match, so each only round-trips (below, and on real files in
# tests/integration/test_store_remote_messages.py).
SINCE: dict[str, Any] = {"O.Row": O.Row, "I.Record": I.Record}

# Floats as Python writes them (1e-07, 1e+16, -0.0): the text must not change with pydantic.
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | st.integers() | FLOATS | st.text(max_size=8)
# What ``Any`` holds after a round trip: JSON data.
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
# What ``Any`` may hold when written: any value the rules cover, written by its own type.
HASHABLE = st.recursive(
    SCALARS | st.sampled_from(list(Scope)) | st.sampled_from(list(RestartStep)),
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
RICH = st.recursive(
    HASHABLE,
    lambda inner: st.lists(inner, max_size=3)
    | st.sets(HASHABLE, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    | st.dictionaries(HASHABLE, inner, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3).map(MappingProxyType),
    max_leaves=10,
)


def strategy(tp: Any, any_values: st.SearchStrategy[Any] = JSON) -> st.SearchStrategy[Any]:
    """Values of ``tp`` with every field varied, optional ones included."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy(a, any_values) for a in args))
    if tp is type(None):
        return st.none()
    if tp is Any:
        return any_values
    if tp is float:
        return FLOATS
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy(args[0], any_values), max_size=4).map(tuple)
        return st.tuples(*(strategy(a, any_values) for a in args))
    if origin is frozenset:
        return st.frozensets(strategy(args[0], any_values), max_size=5)
    if origin is Mapping:
        items = st.dictionaries(strategy(args[0], any_values), strategy(args[1], any_values), max_size=4)
        return items | items.map(MappingProxyType)  # the core keeps Act.args read-only
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return st.builds(tp, **{f.name: strategy(hints[f.name], any_values) for f in dataclasses.fields(tp)})
    return st.from_type(tp)


SECOND_SITES = ("Principal: the remote principal's row (store/remote_messages.py)",)


def test_every_type_the_store_persists_is_checked() -> None:
    """The types the store's modules encode and decode are the ones below: a new kind is added here too."""
    source = "\n".join(p.read_text() for p in sorted(Path(codec.__file__).parent.glob("*.py")) if p.name != "codec.py")
    decoded = set(re.findall(r"codec\.loads\(([\w.\[\]]+),", source))
    assert decoded == set(STORED) | set(SINCE)
    # One type is encoded at two sites: a Principal in grants.py, and the remote principal's row an
    # accepted inbox record writes in remote_messages.py (a type listed above, encoded the same way).
    assert source.count("codec.dumps(") == len(STORED) + len(SINCE) + len(SECOND_SITES)


def test_the_types_stored_since_round_trip_in_every_state() -> None:
    from tests.unit import test_federation_inbox as TI
    from tests.unit import test_federation_outbox as TO

    rows = [r for box in (TO.queued(), TO.published(), TO.accepted(), TO.cancelling()) for r in box.rows.values()]
    records = list(TI.accepted().records.values())
    assert {str(r.state) for r in rows} == {"queued", "published", "accepted", "cancelling"}
    for tp, values in ((SINCE["O.Row"], rows), (SINCE["I.Record"], records)):
        for value in values:
            assert codec.loads(tp, codec.dumps(value)) == value


@pytest.mark.parametrize("name", sorted(STORED))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_text_is_the_legacy_text_and_each_reads_the_other(name: str, data: st.DataObject) -> None:
    tp = STORED[name]
    value = data.draw(strategy(tp), label=name)
    old_text = legacy.dumps(value)
    assert codec.dumps(value) == old_text
    assert codec.loads(tp, old_text) == value
    assert legacy.loads(tp, codec.dumps(value)) == value  # a downgrade still reads the new rows


@settings(max_examples=200, deadline=None)
@given(strategy(Act, RICH))
def test_any_is_written_by_its_own_type_as_before(act: Act) -> None:
    """Act.args holds ``Any``: sets, tuples, enums and non-string keys in it are written as the legacy
    codec wrote them (sorted arrays, arrays, values, sorted pairs), and read back as the same JSON data."""
    old_text = legacy.dumps(act)
    assert codec.dumps(act) == old_text
    assert codec.loads(Act, old_text) == legacy.loads(Act, old_text)


@pytest.mark.parametrize(
    "value",
    [
        frozenset(Scope),
        frozenset(),
        1e16,
        1e-7,
        -0.0,
        5e-324,
        "é\u2028\x00\"\\",
        TokenRecord("h", "p", "i", "%1", 2**70, issued_at=1717000000.123456),
    ],
)
def test_representative_values_write_the_legacy_text(value: Any) -> None:
    assert codec.dumps(value) == legacy.dumps(value)
