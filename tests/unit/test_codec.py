"""The JSON codec for the core's records: round trips, and every refusal names the path and the problem.

That the text is the same as before pydantic, and old text still reads, is tests/unit/test_codec_compat.py."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectcore.consent import Card, CardState
from connectcore.control import Act, Tool
from connectcore.delivery import Message, MessageState
from connectcore.grants import GrantBook, Principal, Scope, TokenRecord
from connectcore.restart import RestartOutcome, RestartRecord, RestartStep
from connectd.store import codec
from connectd.store.codec import CodecError, decode, dumps, encode, loads

# --- generated records ------------------------------------------------------------------------------

FINITE = st.floats(allow_nan=False, allow_infinity=False)


def strategy(tp: Any) -> st.SearchStrategy[Any]:
    """Values of ``tp``; floats finite (JSON has no NaN), every field varied (not only required ones)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy(a) for a in args))
    if tp is type(None):
        return st.none()
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy(args[0]), max_size=4).map(tuple)
        return st.tuples(*(strategy(a) for a in args))
    if origin is frozenset:
        return st.frozensets(strategy(args[0]), max_size=5)
    if tp is float:
        return FINITE
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return st.builds(tp, **{f.name: strategy(hints[f.name]) for f in dataclasses.fields(tp)})
    return st.from_type(tp)


@given(st.one_of(strategy(Message), strategy(Card), strategy(Principal), strategy(TokenRecord)))
def test_round_trip(record: Any) -> None:
    """decode(encode(x)) == x, also through JSON text, for every Message, Card, Principal, TokenRecord."""
    assert decode(type(record), encode(record)) == record
    assert loads(type(record), dumps(record)) == record


@given(strategy(RestartRecord))
def test_round_trip_restart_record(record: RestartRecord) -> None:
    """The restart machine's record round-trips with no codec code of its own."""
    assert loads(RestartRecord, dumps(record)) == record


@given(st.frozensets(st.sampled_from(list(Scope))))
def test_scope_sets_encode_canonically(scopes: frozenset[Scope]) -> None:
    """Equal scope sets encode to the same sorted array, and decode to the same set."""
    data = encode(scopes)
    assert data == sorted(s.value for s in scopes)
    assert decode(frozenset[Scope], data) == scopes


def test_nested_and_mapping_shapes() -> None:
    book = GrantBook(
        principals={"p1": Principal("p1", "claude", "%1", 10, "inc-1", 1.0, session=("claude", "s1"))},
        aliases={("claude", "s1"): "p1"},
        grants={("session", "claude", "s1"): frozenset({Scope.READ}), ("principal", "p2"): frozenset()},
    )
    data = encode(book)
    assert data["principals"]["p1"]["session"] == ["claude", "s1"]
    # Non-string keys become [key, value] pairs; string keys stay an object.
    assert data["aliases"] == [[["claude", "s1"], "p1"]]
    assert decode(GrantBook, json.loads(json.dumps(data))) == book
    pairs = ((("a", "inc-1")), ("b", "inc-2"))
    assert decode(tuple[tuple[str, str], ...], encode(pairs)) == pairs


@dataclass(frozen=True)
class Wide:
    """Every shape the codec claims, in one record."""

    color: Shade
    fixed: tuple[int, str]
    empty: tuple[()]
    nested: tuple[tuple[str, ...], ...]
    env: Mapping[str, str]
    numbers: dict[int, float]
    mode: Literal["a", "b"]
    anything: Any
    choice: int | str
    listed: list[bool]
    maybe: Optional_ = None
    defaulted: tuple[str, ...] = field(default_factory=tuple)
    tags: frozenset[str] = frozenset()


class Shade(Enum):
    DARK = 1
    LIGHT = 2


Optional_ = typing.Optional[float]  # noqa: UP045 - the old spelling must work too


def test_every_declared_shape_round_trips() -> None:
    wide = Wide(
        color=Shade.LIGHT,
        fixed=(1, "x"),
        empty=(),
        nested=(("a", "b"), ()),
        env={"HOME": "/tmp/h"},
        numbers={3: 1.5, 1: 2.0},
        mode="b",
        anything={"free": [1, None]},
        choice="seven",
        listed=[True, False],
        maybe=2.5,
        defaulted=("z",),
        tags=frozenset({"b", "c", "a"}),
    )
    assert loads(Wide, dumps(wide)) == wide
    assert encode(wide)["tags"] == ["a", "b", "c"]
    assert encode(wide)["numbers"] == [[1, 2.0], [3, 1.5]]
    assert encode(wide)["color"] == 2


def test_missing_field_with_default_takes_the_default() -> None:
    data = encode(Principal("p1", "claude", "%1", 10, "inc-1", 1.0))
    del data["merged_into"], data["control"], data["session"]
    assert decode(Principal, data) == Principal("p1", "claude", "%1", 10, "inc-1", 1.0)


def test_int_is_accepted_where_float_is_declared() -> None:
    data = encode(TokenRecord("h", "p", "i", "%1", 1, issued_at=5.0))
    data["issued_at"] = 5
    decoded = decode(TokenRecord, data)
    assert decoded.issued_at == 5.0 and isinstance(decoded.issued_at, float)


# --- refusals -----------------------------------------------------------------------------------------


class Opaque:
    """A type pydantic has no schema for."""


def _principal_data(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = encode(Principal("p1", "claude", "%1", 10, "inc-1", 1.0))
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("tp", "data", "needle"),
    [
        (Principal, _principal_data(extra=1), "Principal.extra: unknown field"),
        (Principal, {"id": "p1"}, "Principal.harness: missing"),
        (Principal, _principal_data(pid="10"), "Principal.pid: Input should be a valid integer, got '10'"),
        (Principal, _principal_data(pid=True), "Principal.pid: Input should be a valid integer, got True"),
        (Principal, _principal_data(pid=10.0), "Principal.pid: Input should be a valid integer, got 10.0"),
        (Principal, _principal_data(created_at="now"), "Principal.created_at: Input should be a valid number"),
        (Principal, _principal_data(created_at=True), "Principal.created_at: Input should be a valid number"),
        (Principal, _principal_data(control=1), "Principal.control: Input should be a valid boolean, got 1"),
        (Principal, _principal_data(harness=7), "Principal.harness: Input should be a valid string, got 7"),
        (Principal, _principal_data(session=["claude"]), "Principal.session[1]: missing"),
        (Principal, _principal_data(session="claude:s1"), "Principal.session: Input should be a valid tuple"),
        (Principal, ["p1"], "Principal: Input should be a dictionary"),
        (TokenRecord, {**encode(TokenRecord("h", "p", "i", "%1", 1)), "state": "zombie"},
         "TokenRecord.state: Input should be 'live', 'revoked' or 'ended', got 'zombie'"),
        (frozenset[Scope], ["read", "root"], "[1]: Input should be 'read', 'history'"),
        (tuple[str, str], ["a", "b", "c"], "Tuple should have at most 2 items after validation, not 3"),
        (dict[str, int], "x", "Input should be a valid dictionary, got 'x'"),
        (dict[tuple[str, str], int], "x", "Input should be a valid list, got 'x'"),
        (dict[tuple[str, str], int], [[["a"], 1]], "[0][0][1]: missing"),
        (Literal["a"], "b", "Input should be 'a', got 'b'"),
        (type(None), 0, "NoneType: Input should be None, got 0"),
        (Opaque, 1, "Opaque: the codec does not handle the type"),
        (GrantBook, {"principals": {"p1": _principal_data(extra=1)}}, "GrantBook.principals.p1.extra: unknown field"),
    ],
)
def test_bad_data_is_refused_with_its_path(tp: Any, data: Any, needle: str) -> None:
    with pytest.raises(CodecError) as caught:
        decode(tp, data)
    assert needle in str(caught.value)


def test_every_problem_is_named_not_only_the_first() -> None:
    with pytest.raises(CodecError) as caught:
        decode(Principal, _principal_data(pid="10", control=1, extra=1))
    assert str(caught.value).count("; ") == 2


def test_card_state_names_the_allowed_values() -> None:
    card = Card("c1", ("p", "m"), "p", "a", "%1", "i", "b", "t", 1, 0.0, 1.0)
    with pytest.raises(CodecError, match=r"Card\.state: Input should be 'pending', 'approved_once'"):
        decode(Card, {**encode(card), "state": "maybe"})
    assert decode(Card, encode(card)).state is CardState.PENDING


def test_not_json_and_not_finite_are_refused() -> None:
    with pytest.raises(CodecError, match="Message: not JSON"):
        loads(Message, "{")
    with pytest.raises(CodecError, match=r"Message: Input should be an object, got \[\]"):
        loads(Message, "[]")
    with pytest.raises(CodecError, match="cannot write"):
        dumps(TokenRecord("h", "p", "i", "%1", 1, issued_at=float("inf")))
    with pytest.raises(CodecError, match="cannot encode a object"):
        encode(object())
    act = Act("a1", Tool.SEND_KEYS, "p", "%1", "i", "shown", args={"keys": object()})
    with pytest.raises(CodecError, match="cannot encode"):
        dumps(act)


def test_a_record_that_refuses_its_values_is_reported() -> None:
    # RestartRecord has no validation, but RestartLimits does: the codec reports the refusal.
    from connectcore.restart import RestartLimits

    with pytest.raises(CodecError, match="RestartLimits refused the values"):
        decode(RestartLimits, {"step": -1.0})
    with pytest.raises(CodecError, match=r"\]\[1\]: Value error, RestartLimits refused the values"):
        decode(tuple[RestartLimits, ...], [{"step": 1.0}, {"step": -1.0}])


def test_enums_encode_as_their_values() -> None:
    assert encode(MessageState.TYPING) == "typing"
    assert encode(RestartStep.CLOSED) == "closed"
    assert decode(RestartOutcome | None, None) is None
    assert codec.decode(RestartOutcome | None, "gave_up") is RestartOutcome.GAVE_UP


@given(st.binary(max_size=64))
def test_bytes_are_base64_text_any_bytes_round_trip(raw: bytes) -> None:
    import base64

    assert encode(raw) == base64.b64encode(raw).decode("ascii")
    assert loads(bytes, dumps(raw)) == raw
    assert decode(bytes | None, encode(raw)) == raw


def test_bytes_that_are_not_utf8_are_written_and_bad_base64_is_refused() -> None:
    assert dumps(b"\xff\x00") == '"/wA="'
    with pytest.raises(CodecError, match="not base64 text"):
        loads(bytes, '"!!"')
    with pytest.raises(CodecError, match="valid bytes"):
        loads(bytes, "3")
