"""Box identity: rules the 2026-12-06 (fourth) mutation run found unpinned (docs/survivors/boxes.md lists
the mutants left as equivalent; each test names the mutants it kills)."""

from __future__ import annotations

import pytest

from connectcore import directory as D
from connectcore.federation import boxes as B
from tests.unit.test_federation_boxes import TOKEN, _place


def test_a_target_placed_on_this_box_reads_as_the_target_alone() -> None:
    """``str(Placed)``: this box's target is written without a box; another box's with ``@box`` (kills
    ``__str__``'s ``box is None`` test dropped and the target written as ``None``)."""
    address = D.PaneAddress("%4", TOKEN)
    assert str(B.Placed(address, None)) == f"%4@{TOKEN}"
    assert str(B.Placed(D.Handle(D.HandleKind.PR, "12"), None, qualified=True)) == "pr:12"
    assert str(B.Placed(address, "laptop")) == f"%4@{TOKEN}@laptop"


def test_a_text_read_two_ways_by_this_box_s_own_name_says_both_readings() -> None:
    """``title:login fix@desk`` (``desk`` is this box) with a local pane titled that whole text: the
    refusal writes the qualified reading as ``title:login fix`` (kills the same ``__str__`` mutants where
    a person reads them)."""
    with pytest.raises(D.TargetError) as caught:
        _place("title:login fix@desk", {"title:login fix@desk": {None: 1}})
    assert str(caught.value) == (
        "title:login fix@desk can be read two ways: title:login fix or the handle title:login fix@desk, which "
        "names panes on this box (1); address the pane as %N@<token>@<box> instead"
    )


def test_a_handle_on_several_boxes_is_refused_with_how_many_panes_it_names() -> None:
    """The ambiguity's ``candidates`` is the panes' count over every box (kills ``candidates`` dropped
    or ``None``)."""
    with pytest.raises(D.TargetError) as caught:
        _place("pr:12", {"pr:12": {None: 2, "laptop": 3}})
    assert caught.value.reason is D.TargetRefusal.AMBIGUOUS
    assert caught.value.candidates == 5


def test_a_handle_no_directory_has_counted_names_no_pane() -> None:
    """A handle the directories hold no count for is ``no_pane``, like one they count 0 for (kills the
    missing count's ``{}`` default -> ``None``)."""
    with pytest.raises(D.TargetError) as caught:
        _place("title:nothing", {})
    assert caught.value.reason is D.TargetRefusal.NO_PANE
    assert str(caught.value) == "no live pane on any box matches title:nothing"


def test_the_boxes_of_an_ambiguous_handle_are_listed_this_box_first_then_by_name() -> None:
    """Whatever order the directories answered in (kills the key's ``box or ""`` -> ``box and ""``)."""
    with pytest.raises(D.TargetError) as caught:
        _place("pr:12", {"pr:12": {"server": 1, "laptop": 2, None: 1}})
    assert str(caught.value) == (
        "pr:12 names panes on 3 boxes: this box (1), laptop (2), server (1); "
        "qualify it: pr:12@desk, pr:12@laptop, pr:12@server"
    )


def test_a_target_that_is_not_text_is_refused_bad_target_saying_its_type() -> None:
    """Kills the non-string refusal's reason or words dropped, or its type named as ``NoneType``."""
    for bad, kind in ((3, "int"), (["%4"], "list")):
        with pytest.raises(D.TargetError) as caught:
            B.readings(bad, own_name="desk", paired_names=())  # type: ignore[arg-type]
        assert caught.value.reason is D.TargetRefusal.BAD_TARGET
        assert str(caught.value) == f"a target is a string, got {kind}"


# --- read at stop 34 ---


@pytest.mark.parametrize(
    ("sign", "seal", "words"),
    [
        (b"k" * 31, b"s" * B.KEY_BYTES, f"a box's signing public key is {B.KEY_BYTES} bytes, got 31 bytes"),
        (b"k" * B.KEY_BYTES, "s" * B.KEY_BYTES, f"a box's sealing public key is {B.KEY_BYTES} bytes, got str"),
    ],
)
def test_a_bad_public_key_is_refused_naming_which_key_and_what_came(sign: bytes, seal: bytes, words: str) -> None:
    """A person fixing a peer's keys reads which key and what was given: its length, or its type
    (kills ``_digest`` 1, 2, 8-11)."""
    with pytest.raises(B.BoxError) as caught:
        B.BoxKeys(sign, seal)
    assert str(caught.value) == words


def test_a_bad_or_taken_box_name_says_what_was_given_and_whose_name_it_is() -> None:
    """The name given, cut to 40 characters (kills ``check_box_name`` 11, 12); a taken name says
    whether it is this box's own or an active pairing's (kills ``check_name_free`` 8, 11)."""
    long = "A" * 50
    with pytest.raises(B.BoxError) as caught:
        B.check_box_name(long)
    assert str(caught.value).endswith(f"got {'A' * 40!r}")
    with pytest.raises(B.BoxError) as caught:
        B.check_name_free("laptop", "laptop", ())
    assert "'laptop' is this box's own name:" in str(caught.value)
    with pytest.raises(B.BoxError) as caught:
        B.check_name_free("desk", "laptop", ("desk",))
    assert "'desk' is the name of an active pairing:" in str(caught.value)
