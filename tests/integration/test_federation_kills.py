"""Either daemon killed at seeded random moments, on real parts (docs/federation.md, "Test plan":
faults, "kill -9 either daemon at seeded random moments during bursts, and restart it"; issue 25).

The setup of test_federation_faults (two ``connectd serve`` daemons, each with its own data directory,
HOME and tmux server, paired over one real ``nats-server``), A's pair rate limit raised for the trials'
sends. Each trial (:func:`kill_trial`) takes a fixed seed (:data:`KILL_SEEDS`: a failure names it),
which chooses the daemon to kill (A's, the sender's, or B's, the recipient's), when each of three
messages is sent, how long the owner on B pauses before approving each card, and the moment of the
``kill -9`` within the flow (wherever it falls: during a send, before a publish, between the publish
and B's receipt, with a card open, approved and waiting to be typed, while typing, awaiting receipts);
the daemon is restarted on its data directory at once and the flow runs to its end. Checked after each
trial: typed at most once (the stand-in's log), exactly one final outcome on A for each message it
admitted (its audit trail and its messages table agree), and nothing B acknowledged lost (held in B's
store with that outcome); a send the kill cut before A committed it is nowhere.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.integration.test_daemon_e2e import send
from tests.integration.test_federation_faults import (
    agents,
    audit,
    finals_on_a,
    outbox_states,
    restart,
    story,
    typed,
)
from tests.integration.test_federation_messages_e2e import _pair
from tests.support.daemon import AgentHandle, DaemonProcess
from tests.support.federation import Box, federated_boxes
from tests.support.nats import NatsServer

KILL_SEEDS = (6, 7, 12, 28)  # fixed: a failure names its seed (the victim and the moments follow from it)
SPAN = 3.5  # seconds from the first send over which the kill is drawn (the flow: sends, publishes, cards, typing)


def moment(a: Box, b: Box, recipient: AgentHandle, texts: dict[str, str]) -> dict[str, str]:
    """Where each of ``texts`` (id -> text) stands just before the kill, for the report and a failure's
    message: typed on B, its card open on B, else A's outbox state (``unsent``: no row on A yet). Read
    with clients of its own (it runs on the killer's thread)."""
    def get(box: Box, path: str) -> Any:
        with httpx2.Client(base_url=box.daemon.base_url, timeout=5,
                           headers={"Authorization": f"Bearer {box.daemon.owner_token}"}) as client:
            return client.get(path).json()

    states: dict[str, str] = {}
    for r in get(a, "/api/audit?limit=200"):  # newest first: the first seen is the row's state now
        if r["action"] == "federation.outbox":
            states.setdefault(r["message_id"].rsplit("/", 1)[-1], r["outcome"])
    open_cards = {c["text"] for c in get(b, "/api/cards")}
    counts = typed(recipient)
    return {mid: "typed" if counts[text] else "card open" if text in open_cards else states.get(mid, "unsent")
            for mid, text in texts.items()}


class Killer:
    """``kill -9`` the victim's daemon at ``at`` seconds from :meth:`arm`, on a thread of its own (so it
    can land in the middle of a send or an approval), noting where the messages stood just before."""

    def __init__(self, victim: Box, at: float, snapshot: Callable[[], dict[str, str]]) -> None:
        self.victim, self.snapshot = victim, snapshot
        self.timer = threading.Timer(at, self.fire)
        self.fired = threading.Event()
        self.at_kill: dict[str, str] | str = "not yet"

    def arm(self) -> None:
        self.timer.start()

    def fire(self) -> None:
        try:
            self.at_kill = self.snapshot()
        except Exception as exc:  # noqa: BLE001 - only a note for the report; the kill must happen
            self.at_kill = f"unread ({exc!r})"
        proc = self.victim.daemon.proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        self.fired.set()

    def down(self, box: Box) -> bool:
        """``box``'s daemon is the one killed (its calls fail until :func:`restart`)."""
        return self.fired.is_set() and box is self.victim


def clear_left_draft(b: Box, recipient: AgentHandle, texts: dict[str, str]) -> None:
    """B killed while typing leaves the text in the recipient's composer, its message ``unconfirmed``
    (never typed twice: nothing more is typed into a draft, so the next messages wait): the person at
    B's screen clears it, as they would."""
    unconfirmed = {r["message_id"] for r in b.daemon.api("GET", "/api/audit?outcome=unconfirmed&limit=100")}
    if unconfirmed & set(texts) and b.daemon.agent_view(recipient.pane)["composer"] == "draft":
        b.daemon.tmux.tmux("send-keys", "-t", recipient.pane, *["BSpace"] * 80)


def kill_trial(a: Box, b: Box, sender: AgentHandle, recipient: AgentHandle, seed: int) -> str:
    """One trial: three messages A -> B sent at seeded offsets, each card on B approved after a seeded
    pause, and the daemon the seed names (A's or B's) killed (``kill -9``) at a seeded moment of that flow,
    then restarted on its data directory; run until each message A admitted has a final outcome on A (a
    send whose call the kill cut is admitted if A's messages table holds it after the restart). Then the
    invariants: typed at most once (delivered: once; refused, declined, cancelled, expired: never);
    exactly one final outcome on A, the same in its messages table; whatever B acknowledged (its inbox
    accepted it, or A heard its ``accepted`` receipt) held in B's store with that outcome; a message A
    never admitted is nowhere on B. Returns what happened, for the report."""
    rng = random.Random(seed)
    victim = rng.choice([a, b])
    texts = {f"k{seed}-{i}": f"seed {seed}: message {i} across a crash" for i in range(1, 4)}
    offsets = [0.0] + sorted(rng.uniform(0.0, 1.0) for _ in range(len(texts) - 1))
    sends = list(zip(offsets, texts.items(), strict=True))
    kill_at = rng.uniform(0.0, SPAN)
    pauses = [rng.uniform(0.2, 1.2) for _ in range(12)]  # the owner's pause before each card it approves
    seen: dict[str, tuple[float, float]] = {}  # card id -> (first seen, its pause)
    admitted: set[str] = set()
    in_doubt: set[str] = set()  # sends the kill cut: admitted or not, A's store says after its restart
    killer = Killer(victim, kill_at, lambda: moment(a, b, recipient, texts))
    to = f"{recipient.address}@devbox"
    start = time.monotonic()
    killer.arm()
    restarted, checked = False, 0.0
    try:
        while True:
            now = time.monotonic() - start
            if killer.fired.is_set() and not restarted:
                restart(victim)  # already dead: reaped, then started on the same data directory and tmux server
                restarted = True
                if in_doubt:
                    held = {m["message_id"] for m in a.run("messages", "--all")["items"]}
                    admitted |= in_doubt & held
            while sends and sends[0][0] <= time.monotonic() - start:
                _, (mid, text) = sends.pop(0)
                try:
                    err, answer = anyio.run(send, a.daemon, sender, to, text, mid)
                except Exception:
                    if not killer.down(a) or restarted:
                        raise
                    in_doubt.add(mid)  # the call cut by the kill; the next sends wait for the restart
                    break
                assert not err and answer["outcome"] == "queued", (mid, answer)  # type: ignore[index]
                admitted.add(mid)
            try:
                for card in b.daemon.cards():
                    first, pause = seen.setdefault(card["id"], (now, pauses[len(seen) % len(pauses)]))
                    if now - first >= pause:
                        done = b.daemon.http().post(f"/api/cards/{card['id']}/approve", json={"pair": False})
                        assert done.status_code in (200, 409), done.text  # 409: it closed meanwhile
            except httpx2.TransportError:
                if not killer.down(b) or restarted:
                    raise
            if not sends and restarted and now - checked >= 0.5:
                checked = now
                if victim is b:
                    clear_left_draft(b, recipient, texts)
                if admitted <= set(finals_on_a(a)):
                    break
            if now > 90:
                raise AssertionError(f"no final outcome on A for each in 90 s (killed {victim.name} at {kill_at:.2f} "
                                     f"s: {killer.at_kill})\n{story(a, b, recipient)}")
            time.sleep(0.05)
    finally:
        killer.timer.cancel()
        killer.timer.join()
    time.sleep(1.0)  # anything that would come twice comes now
    context = f"killed {victim.name} at {kill_at:.2f} s, when {killer.at_kill}"
    finals = finals_on_a(a)
    rows = {m["message_id"]: m["outcome"] for m in a.run("messages", "--all")["items"] if m["message_id"] in texts}
    counts = typed(recipient)
    acknowledged = {r["message_id"].rsplit("/", 1)[-1] for r in audit(b, "federation.inbox") if r["outcome"] == "accepted"}
    acknowledged |= outbox_states(a, "accepted")
    held = {m["message_id"]: m["outcome"] for m in b.run("messages", "--all")["items"] if m["from_box"] == "laptop"}
    for mid, text in texts.items():
        assert counts[text] <= 1, (context, mid, counts)  # never typed twice
        if mid not in admitted:  # a send the kill cut before A committed it: nowhere
            assert mid not in rows and mid not in held and counts[text] == 0, (context, mid, rows, held, counts)
            continue
        assert len(finals[mid]) == 1, (context, mid, finals[mid])  # exactly one final outcome on A
        (outcome,) = finals[mid]
        assert rows[mid] == outcome, (context, mid, rows[mid], outcome)
        if outcome == "delivered":
            assert counts[text] == 1, (context, mid, counts)
        elif outcome != "unconfirmed":
            assert counts[text] == 0, (context, mid, outcome, counts)
        if mid in acknowledged:
            assert held.get(mid) == outcome, (context, mid, held.get(mid), outcome)  # nothing acknowledged lost
    cut = f"; cut sends {sorted(in_doubt)} (admitted: {sorted(in_doubt & admitted)})" if in_doubt else ""
    return f"seed {seed}: {context}{cut}; outcomes {[finals[mid][0] for mid in texts if mid in admitted]}"


@pytest.fixture
def roomy_boxes(tmp_path: Path) -> Iterator[tuple[Box, Box, NatsServer]]:
    """The two boxes, A's pair rate limit raised above the trials' sends (10 a minute by default)."""
    def roomy(root: Path, tmux: Any) -> DaemonProcess:
        return DaemonProcess(root, tmux, policy="[limits]\npair_per_window = 100\n")

    with federated_boxes(tmp_path, ["laptop", "devbox"], make_daemon=roomy) as (made, server):
        yield made[0], made[1], server  # type: ignore[misc]


def test_either_daemon_killed_at_seeded_random_moments_types_once_and_loses_nothing(
    roomy_boxes: tuple[Box, Box, NatsServer],
) -> None:
    """``kill -9`` either daemon at seeded random moments of a flow (during a send, before a publish,
    between the publish and B's receipt, while a card is open, while typing: wherever the seed's moment
    falls), and restart it: every trial (:func:`kill_trial`, one per seed of :data:`KILL_SEEDS`) ends
    with each message typed at most once, exactly one final outcome on A for each it admitted, and
    nothing B acknowledged lost."""
    a, b, _server = roomy_boxes
    _pair(a, b)
    sender, recipient = agents(a, b)
    for seed in KILL_SEEDS:
        try:
            print(kill_trial(a, b, sender, recipient, seed))
        except AssertionError as failed:
            failed.add_note(f"kill trial seed {seed} (KILL_SEEDS in {__name__})")
            raise
        a.daemon.wait_ready(sender, 30)
        b.daemon.wait_ready(recipient, 30)
