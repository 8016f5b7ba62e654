"""Box identity: box ids and fingerprints from public keys, box names, qualified targets and the
ambiguity rule (connectcore.federation.boxes; docs/federation.md "Box identity", "The rules on each box")."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectcore import directory as D
from connectcore.federation import boxes as B

SIGN = bytes(range(32))
SEAL = bytes(range(32, 64))
TOKEN = "51d7a9c03e6f2b18"
keys32 = st.binary(min_size=32, max_size=32)


def test_box_id_and_fingerprint_are_the_documented_digest() -> None:
    """Claim: id = base32(SHA-256(tag||sign||seal)[:10]) lowercased, fingerprint = its first 16 bytes
    in hex groups of four, computed independently here."""
    digest = hashlib.sha256(b"connect-box-v1" + SIGN + SEAL).digest()
    assert B.box_id(SIGN, SEAL) == base64.b32encode(digest[:10]).decode().lower()
    hexed = digest[:16].hex()
    assert B.fingerprint(SIGN, SEAL) == " ".join(hexed[i : i + 4] for i in range(0, 32, 4))
    assert B.short_fingerprint(SIGN, SEAL) == hexed[:8]
    keys = B.BoxKeys(SIGN, SEAL)
    assert (keys.box_id, keys.fingerprint) == (B.box_id(SIGN, SEAL), B.fingerprint(SIGN, SEAL))


@given(keys32, keys32)
def test_every_box_id_is_a_valid_box_id_and_subject_token(sign: bytes, seal: bytes) -> None:
    """Claim: any two 32-byte keys give a 16-character [a-z2-7] id that check_box_id accepts."""
    ident = B.box_id(sign, seal)
    assert B.check_box_id(ident) == ident
    assert "." not in ident and len(ident) == 16
    assert len(B.fingerprint(sign, seal)) == 39


@given(keys32, keys32)
def test_swapping_the_two_keys_makes_another_box(sign: bytes, seal: bytes) -> None:
    """Claim: the id binds which key is for signing and which for sealing (unless they are equal)."""
    if sign != seal:
        assert B.box_id(sign, seal) != B.box_id(seal, sign)


@pytest.mark.parametrize("bad", [b"", bytes(31), bytes(33), "x" * 32])
def test_a_key_of_the_wrong_size_is_refused_loudly(bad: object) -> None:
    with pytest.raises(B.BoxError, match="32 bytes") as caught:
        B.box_id(bad, SEAL)  # type: ignore[arg-type]
    assert caught.value.reason == "bad_key"
    with pytest.raises(B.BoxError, match="sealing public key"):
        B.BoxKeys(SIGN, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["laptop", "a", "dev-box-2", "x" * 32])
def test_valid_box_names(good: str) -> None:
    assert B.check_box_name(good) == good


@pytest.mark.parametrize("bad", ["", "Laptop", "my box", "x" * 33, "lap.top", "lap@top", "é"])
def test_invalid_box_names_are_refused_naming_the_rule(bad: str) -> None:
    with pytest.raises(B.BoxError, match="1 to 32 characters of a-z, 0-9 and -") as caught:
        B.check_box_name(bad)
    assert caught.value.reason == "bad_box_name"


@pytest.mark.parametrize("bad", ["", "ABCDEFGHIJKLMNOP", "abcdefghijklmno1", "abcdefghijklmnop0", "a" * 15])
def test_invalid_box_ids_are_refused(bad: str) -> None:
    with pytest.raises(B.BoxError, match="16 characters") as caught:
        B.check_box_id(bad)
    assert caught.value.reason == "bad_box_id"


def test_a_name_is_free_unless_it_is_ours_or_an_active_pairing_s() -> None:
    assert B.check_name_free("devbox", "laptop", {"server"}) == "devbox"
    for taken, whose in (("laptop", "own name"), ("server", "active pairing")):
        with pytest.raises(B.BoxError, match=whose) as caught:
            B.check_name_free(taken, "laptop", {"server"})
        assert caught.value.reason == "name_taken"


# --- qualified targets ------------------------------------------------------------------------------

OWN, PEERS = "desk", frozenset({"laptop", "server"})


def _readings(text: str) -> tuple[B.Placed, ...]:
    return B.readings(text, own_name=OWN, paired_names=PEERS)


def _place(text: str, matches: dict[str, dict[str | None, int]] | None = None) -> B.Placed:
    return B.place(text, own_name=OWN, paired_names=PEERS, matches=matches or {})


def test_an_address_qualified_by_a_paired_box_goes_to_that_box() -> None:
    placed = _place(f"%4@{TOKEN}@laptop")
    assert placed == B.Placed(D.PaneAddress("%4", TOKEN), "laptop", qualified=True)
    assert str(placed) == f"%4@{TOKEN}@laptop"


def test_an_unqualified_address_is_this_box_as_today() -> None:
    assert _place(f"%4@{TOKEN}") == B.Placed(D.PaneAddress("%4", TOKEN), None)


def test_a_target_qualified_by_this_box_s_own_name_is_this_box() -> None:
    assert _place(f"%4@{TOKEN}@desk") == B.Placed(D.PaneAddress("%4", TOKEN), None, qualified=True)


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("pr:12@laptop", D.Handle(D.HandleKind.PR, "12")),
        ("control@laptop", D.Handle(D.HandleKind.CONTROL)),
    ],
)
def test_handles_qualified_by_a_box_have_one_reading(text: str, target: D.Handle) -> None:
    assert _readings(text) == (B.Placed(target, "laptop", qualified=True),)
    assert _place(text, {str(target): {None: 3}}) == B.Placed(target, "laptop", qualified=True)


def test_an_address_qualified_by_a_name_no_pairing_has_is_unknown_box() -> None:
    with pytest.raises(B.BoxError, match="no active pairing is named 'nowhere'") as caught:
        _place(f"%4@{TOKEN}@nowhere")
    assert caught.value.reason == "unknown_box"


def test_a_title_ending_in_an_unknown_name_is_just_a_title() -> None:
    assert _readings("title:mail@home") == (B.Placed(D.Handle(D.HandleKind.TITLE, "mail@home"), None),)


def test_a_title_that_reads_two_ways_goes_to_the_box_when_the_other_reading_names_nothing() -> None:
    text = "title:login fix@laptop"
    qualified = B.Placed(D.Handle(D.HandleKind.TITLE, "login fix"), "laptop", qualified=True)
    assert _readings(text) == (qualified, B.Placed(D.Handle(D.HandleKind.TITLE, "login fix@laptop"), None))
    assert _place(text, {"title:login fix@laptop": {None: 0}}) == qualified


def test_a_title_that_reads_two_ways_is_ambiguous_when_both_readings_can_name_panes() -> None:
    """A local pane titled 'login fix@laptop' makes the text ambiguous: never guessed."""
    with pytest.raises(D.TargetError, match="can be read two ways") as caught:
        _place("title:login fix@laptop", {"title:login fix@laptop": {None: 1}})
    assert caught.value.reason is D.TargetRefusal.AMBIGUOUS
    assert caught.value.candidates == 1


def test_an_unqualified_handle_on_one_box_goes_to_that_box() -> None:
    assert _place("pr:12", {"pr:12": {"laptop": 1, None: 0}}) == B.Placed(D.Handle(D.HandleKind.PR, "12"), "laptop")
    assert _place("pr:12", {"pr:12": {None: 2}}) == B.Placed(D.Handle(D.HandleKind.PR, "12"), None)


def test_an_unqualified_handle_on_several_boxes_is_ambiguous_with_counts_and_qualified_forms() -> None:
    with pytest.raises(D.TargetError) as caught:
        _place("pr:12", {"pr:12": {None: 1, "laptop": 1, "server": 0}})
    assert caught.value.reason is D.TargetRefusal.AMBIGUOUS
    assert str(caught.value) == (
        "pr:12 names panes on 2 boxes: this box (1), laptop (1); qualify it: pr:12@desk, pr:12@laptop"
    )


def test_an_unqualified_handle_that_names_nothing_anywhere_is_no_pane() -> None:
    with pytest.raises(D.TargetError, match="no live pane on any box") as caught:
        _place("title:nothing", {"title:nothing": {None: 0, "laptop": 0}})
    assert caught.value.reason is D.TargetRefusal.NO_PANE


@pytest.mark.parametrize("bad", ["", "%4", "%4@@laptop", "window:2@laptop", "pr:abc@laptop"])
def test_malformed_targets_are_bad_target(bad: str) -> None:
    with pytest.raises(D.TargetError) as caught:
        _place(bad)
    assert caught.value.reason is D.TargetRefusal.BAD_TARGET


@given(st.sampled_from(sorted(PEERS | {OWN})), st.integers(min_value=0, max_value=999))
def test_a_qualified_address_always_reads_one_way(name: str, pane: int) -> None:
    """Claim: `%N@<token>@<known box>` has exactly one reading, on that box (None for our own name)."""
    (only,) = _readings(f"%{pane}@{TOKEN}@{name}")
    assert only == B.Placed(D.PaneAddress(f"%{pane}", TOKEN), None if name == OWN else name, qualified=True)
