"""What a message waits for, in words (issue 22 item 4): one reason per way a message that is not final
is held before it is typed, decided by :func:`connectcore.reads.waits_for` from the hub and the
daemon's facts about the recipient (its release, its screen's reading)."""

from __future__ import annotations

from connectcore import hub as H
from connectcore import reads as R
from connectcore.consent import Decision
from connectcore.releases import ReleaseStatus
from connectcore.screen import Activity, Composer

from .hubkit import Agent, World
from .test_hub_restarts import begin

IDLE = R.Recipient(ReleaseStatus.VERIFIED, Activity.IDLE, Composer.EMPTY)


def approved(w: World, a: Agent, b: Agent) -> tuple[str, str]:
    key = w.send(a, b)
    w.decide(key, Decision.APPROVE_PAIR)
    return key


def words(w: World, key: tuple[str, str], recipient: R.Recipient = IDLE) -> str:
    return R.waits_for(w.hub, w.message(key), recipient)


def test_a_message_with_an_open_card_waits_for_the_person_to_answer_that_card() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b)
    assert words(w, key) == f"until the person answers card {w.card_of(key)}"


def test_a_final_message_waits_for_nothing() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    declined = w.send(a, b)
    w.decide(declined, Decision.DECLINE)
    assert words(w, declined) == ""
    delivered = approved(w, a, b)
    w.deliver(delivered, b)
    assert w.message(delivered).outcome == "delivered" and words(w, delivered) == ""


def test_a_message_whose_recipient_release_is_unknown_or_unverified_says_so() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = approved(w, a, b)
    w.idle(b, ready=False)  # the daemon reads an agent of an unknown release never ready
    unknown = R.Recipient(ReleaseStatus.UNKNOWN, Activity.IDLE, Composer.EMPTY)
    assert words(w, key, unknown) == "until its release is known"
    unverified = R.Recipient(ReleaseStatus.UNVERIFIED, Activity.IDLE, Composer.EMPTY)
    assert words(w, key, unverified).startswith("until its release is verified (make compat) or trusted")


def test_a_message_to_an_opencode_launch_not_yet_bound_waits_for_its_session() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b", harness="opencode")
    key = approved(w, a, b)
    w.idle(b, ready=False)  # the daemon reads it never ready until its session binds
    binding = R.Recipient(ReleaseStatus.VERIFIED, Activity.IDLE, Composer.EMPTY, binding=True)
    assert words(w, key, binding) == "until its OpenCode session is bound"


def test_a_message_to_a_busy_a_questioning_or_a_drafting_recipient_says_which() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = approved(w, a, b)
    w.idle(b, "fp-busy", ready=False)
    assert words(w, key, R.Recipient(ReleaseStatus.VERIFIED, Activity.BUSY, Composer.ABSENT)) == "until it finishes its turn (busy)"
    assert words(w, key, R.Recipient(ReleaseStatus.VERIFIED, Activity.DIALOG, Composer.ABSENT)) == (
        "until the question on its screen is answered"
    )
    assert words(w, key, R.Recipient(ReleaseStatus.VERIFIED, Activity.IDLE, Composer.DRAFT)) == (
        "until the draft in its composer is sent or cleared"
    )
    assert words(w, key, R.Recipient(ReleaseStatus.VERIFIED, Activity.UNKNOWN, Composer.ABSENT)) == (
        "until its screen reads as waiting for input (it is not read as any known screen now)"
    )
    assert words(w, key) == "until it next waits for input with an empty composer"


def test_a_message_to_a_pane_never_read_waits_for_its_screen_to_be_read() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = approved(w, a, b)
    assert b.pane not in w.hub.panes
    assert words(w, key, R.Recipient(ReleaseStatus.VERIFIED, None, None)) == "until its screen is read"
    assert words(w, key) == "until its screen is read"  # the hub has no reading either


def test_a_message_being_checked_or_typed_and_the_one_behind_it_say_so() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    first, second = approved(w, a, b), w.send(a, b)
    assert w.message(second).state.value == "ready"  # the pair is approved: no card
    w.idle(b)  # armed: the first goes to the guard
    assert words(w, first) == "until the check of its screen just before typing ends"
    assert words(w, second) == "until the message before it is typed"
    w.guard(first, b)
    assert words(w, first) == "until its typing is confirmed on the recipient's screen"
    assert words(w, second) == "until the message before it is typed"
    w.typed(first, fingerprint="fp-idle")  # landed, on the screen typed into: its turn not yet seen
    assert words(w, second) == "until the turn of the message typed before it shows"


def test_a_message_behind_connect_s_own_unsent_draft_says_the_person_must_clear_it() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    first, second = approved(w, a, b), w.send(a, b)
    w.idle(b)
    w.guard(first, b)
    w.typed(first, fingerprint="fp-draft", draft=True)
    assert b.pane in w.hub.drafts
    drafting = R.Recipient(ReleaseStatus.VERIFIED, Activity.IDLE, Composer.DRAFT)
    assert words(w, second, drafting) == "until connect's unsent draft in its composer is cleared (see Needs you)"


def test_a_message_to_a_pane_being_restarted_waits_for_the_restart() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = approved(w, a, b)
    begin(w, b)
    assert H.restart_of_pane(w.hub, b.pane) is not None
    assert words(w, key) == "until its restart-to-connect ends"


def test_a_message_whose_handle_names_no_single_pane_waits_for_it_to_name_one() -> None:
    w = World()
    a, b = w.launch("a"), w.launch("b")
    key = w.send(a, b, handle="title:b")
    w.decide(key, Decision.APPROVE_PAIR)
    w.idle(b)
    w.guard(key, b, handle=H.Unresolved("ambiguous"))
    assert H.NO_SINGLE_PANE in w.message(key).reason
    assert words(w, key) == "until title:b names a single pane again"


def test_waiting_lists_a_recipient_s_messages_oldest_first_and_the_lines_count_them() -> None:
    w = World()
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    first, second = approved(w, a, b), w.send(a, b)
    carded = w.send(c, b)
    w.send(a, c)  # to another pane: not b's
    unknown = R.Recipient(ReleaseStatus.UNKNOWN, Activity.IDLE, Composer.EMPTY)
    listed = R.waiting(w.hub, b.pane, b.incarnation, unknown)
    assert listed == (
        (first[1], "until its release is known"),
        (second[1], "until its release is known"),
        (carded[1], f"until the person answers card {w.card_of(carded)}"),
    )
    assert R.waiting(w.hub, b.pane, "inc-other", unknown) == ()
    assert R.waiting_lines([words for _id, words in listed]) == (
        "2 messages wait: until its release is known",
        f"1 message waits: until the person answers card {w.card_of(carded)}",
    )


def test_awaited_names_exactly_the_incarnations_some_message_not_final_is_for() -> None:
    w = World()
    a, b, c = w.launch("a"), w.launch("b"), w.launch("c")
    assert R.awaited(w.hub) == frozenset()
    declined = w.send(a, c)
    w.decide(declined, Decision.DECLINE)  # final: c awaits nothing
    w.send(a, b)
    assert R.awaited(w.hub) == {(b.pane, b.incarnation)}
