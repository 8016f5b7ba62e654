"""The invariants of the whole daemon, checked while the simulation runs.

Each check's docstring states its invariant in one line. Safety checks run at every paste (the moment
something could go wrong for a person) and after every step of the schedule; liveness checks run once
the schedule has quiesced (faults off, the person answering every card and clearing every composer).
A violation is recorded with the logical time it was seen at; the run's seed replays it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from connectcore import consent, grants
from connectcore import directory as D
from connectcore import hub as H
from connectcore.delivery import Message, MessageState
from connectcore.grants import TokenState

if TYPE_CHECKING:
    from connectd.daemon.parts import Engine
    from tests.simulation.driver import Sim
    from tests.simulation.sim_tmux import Paste

# Violation kinds that are known, unfixed defects: `make simulate ALLOW_KNOWN=1` counts them and fails
# only on anything else.
KNOWN_DEFECTS: dict[str, str] = {}  # every defect the simulation found is fixed (see test_scenarios.py)

# What a supervised task may fail with (an injected fault); anything else is a bug that ends a task.
EXPECTED_TASK_ERRORS = frozenset(
    {"TmuxError", "TmuxNoServer", "StoreFault", "RestartEffectFailed", "Cancelled"}
)


class Checker:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.typed: dict[str, int] = {}  # message body -> pastes of it
        self.finals: dict[str, str] = {}  # message ref -> its final outcome, once durable
        self.races = 0  # pastes into a pane that changed after the daemon's last look (unseeable)
        # (principals, the daemon's life, the daemon's clock when it returned): a message's created_at is
        # the clock of the life it was admitted in, and the wall clock may be stepped between two lives,
        # so admissions are ordered by life first, then by that life's clock (never against the true
        # timeline: seeds 875 and 6206 compared a clock stepped back 120 s with it)
        self.revocations: list[tuple[frozenset[str], int, float]] = []
        self.withdrawn: set[str] = (
            set()
        )  # token hashes of restarts in flight when their connect was withdrawn
        sim.server.on_paste = self.on_paste

    # --- at every paste ---------------------------------------------------------------------------

    def on_paste(self, paste: Paste) -> None:
        self.clean_screen(paste)
        engine = self.sim.engine
        body = _body(paste.text)
        if body is None or engine is None:
            return
        self.at_most_once(body)
        message = next((m for m in engine.hub.messages.values() if m.typed == paste.text), None)
        if message is None:
            self.sim.violate(f"pasted {body} into {paste.pane_id}, which no message of the hub holds")
            return
        self.not_after_revocation(message, body)
        self.handle_still_names(message, paste, body)
        self.same_incarnation(message, paste, body)

    def clean_screen(self, paste: Paste) -> None:
        """Nothing is typed into a busy pane, over a draft or into a menu that the daemon could see."""
        if paste.clean:
            return
        if not paste.seen_version:
            self.races += 1  # the screen changed after the daemon's last look: no reader could know
            return
        self.sim.violate(
            f"typed into {paste.pane_id} while it was busy, held a draft or a menu: {paste.text[:60]!r}"
        )

    def at_most_once(self, body: str) -> None:
        """At most one typing attempt per admitted message, across daemon restarts."""
        self.typed[body] = self.typed.get(body, 0) + 1
        if self.typed[body] > 1:
            self.sim.violate(f"{body} typed {self.typed[body]} times")

    def note_revocation(self, principals: frozenset[str], engine: Any) -> None:
        """(A revocation returned on ``engine``, the daemon that ran it: it may have been killed in the same
        instant, by a fault in another of its tasks, and its commit holds all the same.)"""
        self.revocations.append((principals, self.sim.starts, engine.clock()))

    def not_after_revocation(self, message: Message, body: str) -> None:
        """Nothing of a message admitted before the revocation of either end is typed after it returned."""
        ends = {message.sender} | ({message.recipient_principal} if message.recipient_principal else set())
        sent = self.sim.sent.get(body)
        life = sent.life if sent is not None else self.sim.starts
        for principals, revoked_life, returned in self.revocations:
            before = life < revoked_life or (life == revoked_life and message.created_at < returned)
            if ends & principals and before:
                self.sim.violate(f"{body} typed after the revocation of {sorted(ends & principals)} returned")

    def handle_still_names(self, message: Message, paste: Paste, body: str) -> None:
        """A message addressed by a handle is typed only into the one pane the handle names now."""
        if not message.handle or not message.handle.startswith("title:"):
            return
        title = message.handle.split(":", 1)[1]
        named = [
            p for p, pane in self.sim.server.panes.items() if pane.agent is not None and pane.title == title
        ]
        if named != [paste.pane_id]:
            self.sim.violate(
                f"{body} for {message.handle} typed into {paste.pane_id}; the handle names {named}",
                kind="handle_moved",
            )

    def same_incarnation(self, message: Message, paste: Paste, body: str) -> None:
        """A message addressed to %N@incarnation is typed only into that incarnation of %N."""
        if paste.pane_id != message.recipient_pane or paste.incarnation != message.recipient_incarnation:
            self.sim.violate(
                f"{body} for {message.recipient_pane}@{message.recipient_incarnation} typed into "
                f"{paste.pane_id}@{paste.incarnation}, another incarnation",
                kind="wrong_incarnation",
            )

    # --- after every step -------------------------------------------------------------------------

    def note_withdrawn(self, token_hashes: frozenset[str]) -> None:
        self.withdrawn |= token_hashes

    def after_step(self) -> None:
        engine = self.sim.engine
        if engine is None:
            return
        self.revocation_not_undone(engine)
        for message in list(engine.runner.durable.messages.values()):
            self.one_final_outcome(message)

    def revocation_not_undone(self, engine: Engine) -> None:
        """A restart in flight when its agent's connect was withdrawn never brings it back connected."""
        for token_hash in sorted(self.withdrawn):
            if grants.authenticate_or_none(engine.hub.book, token_hash) is not None:
                self.withdrawn.discard(token_hash)
                self.sim.violate(
                    "a revocation was undone: the restart in flight gave the respawned agent a live token"
                )

    def one_final_outcome(self, message: Message) -> None:
        """A message's final outcome, once durable, never changes (across daemon restarts too).

        Judged on the runner's durable hub (what a restart recovers; no caller hears an outcome, and
        no audit record of it exists, before it is durable), not on its working hub: a step's outcome
        is there before its commit, and a commit that fails (the store, a kill) takes it back, which
        is no outcome changing (seeds 492, 589, 975, 5063 and 5519 with the lock fast path). Within
        one commit a final message never moves: MESSAGE_TABLE has no edge out of a final state, and
        the hub model checks one final outcome per message."""
        seen = self.finals.get(message.ref)
        if not message.is_final:
            if seen is not None:
                self.sim.violate(
                    f"{message.ref} ({_body(message.typed)}) was {seen}, now {message.state} again"
                )
            return
        if seen is None:
            self.finals[message.ref] = message.outcome
            if message.state is MessageState.DELIVERED:
                self.delivered_only_when_seen(message)
        elif seen != message.outcome:
            self.sim.violate(f"{message.ref} ({_body(message.typed)}) was {seen}, now {message.outcome}")

    def delivered_only_when_seen(self, message: Message) -> None:
        """ "delivered" only where the provenance marker was seen submitted on the recipient's screen."""
        marker = "> " + message.typed.split("\n", 1)[0][:60]
        captures = self.sim.server.captures.get(message.recipient_pane, [])
        if not any(marker in text for _, _, text in captures):
            self.sim.violate(
                f"{message.ref} ({_body(message.typed)}) delivered, but its marker never showed",
                kind="delivered_unseen",
            )

    def after_start(self, engine: Engine, first_look: set[str]) -> None:
        """After recovery, no live token belongs to an incarnation the daemon's first look did not find.
        (Compared with the first look, not the directory now: a poll that began since may already have
        seen an agent exit and not yet stepped its ``PaneGone``; seed 5633.)"""
        live = first_look
        for token in engine.hub.book.tokens.values():
            if token.state is TokenState.LIVE and token.incarnation not in live:
                self.sim.violate(
                    f"after recovery, a live token for the dead incarnation {token.pane_id}@{token.incarnation}"
                )
        self.nothing_held_for_the_dead(engine, live)

    def nothing_held_for_the_dead(self, engine: Engine, live: set[str]) -> None:
        """After recovery, no message, card or left draft is still held for an incarnation the first look
        did not find, whether or not it held a token (reconciliation ends each as if its pane went)."""
        held = [
            (m.ref, m.recipient_pane, m.recipient_incarnation)
            for m in engine.hub.messages.values()
            if not m.is_final and m.recipient_incarnation not in live
        ] + [
            (c.id, c.recipient_pane, c.recipient_incarnation)
            for c in engine.hub.cards.values()
            if consent.is_open(c) and c.recipient_incarnation not in live
        ] + [
            (f"a draft connect may have left in {d.pane_id}", d.pane_id, d.incarnation)
            for d in engine.hub.drafts.values()
            if d.incarnation not in live
        ]
        for ref, pane, incarnation in held:
            self.sim.violate(
                f"after recovery, {ref} still open for the dead incarnation {pane}@{incarnation}",
                kind="held_for_dead",
            )

    # --- once quiet -------------------------------------------------------------------------------

    def settled(self) -> bool:
        """Quiescence may end early: no restart open, every message final, and no live token for an
        agent that has ended (one that ended a moment ago is seen at the daemon's next poll: wait for
        it, up to quiescence's end, where the same check is the invariant)."""
        engine = self.sim.engine
        assert engine is not None
        return (
            not engine.hub.restarts
            and all(m.is_final for m in engine.hub.messages.values())
            and not self._tokens_of_ended(engine)
        )

    def at_end(self) -> None:
        sim = self.sim
        engine = sim.engine
        if engine is None:
            sim.violate("the daemon is not running at the end")
            return
        self.every_message_final(engine)
        self.restarts_closed_clean(engine)
        self.tokens_only_for_live(engine)

    def every_message_final(self, engine: Engine) -> None:
        """Every admitted message reaches a final outcome once the schedule quiesces, except one whose
        handle names no pane or several (it waits, never guessed, until its hour ends)."""
        for message in engine.store.messages(limit=100_000):
            if not message.is_final and not _handle_unresolved(engine, message):
                view = engine.hub.panes.get(message.recipient_pane)
                agent = self.sim.server.panes.get(message.recipient_pane)
                self.sim.log(
                    f"  hub's view of {message.recipient_pane}: {view}; the pane: {agent}; "
                    f"attempts: {engine.hub.attempts}; restarts: {list(engine.hub.restarts)}; message: {message}"
                )
                stalled = (
                    "guard_stall"
                    if view is not None and view.ready and view.armed and not engine.hub.attempts
                    else "idle_stall"
                )
                self.sim.violate(
                    f"{message.ref} ({_body(message.typed)}) still {message.state} after quiescence",
                    kind=stalled if message.state is MessageState.READY else "not_final",
                )

    def restarts_closed_clean(self, engine: Engine) -> None:
        """Every restart closes, and leaves no pane dead or with the temporary remain-on-exit."""
        for restart_id, state in engine.hub.restarts.items():
            pane = self.sim.server.panes.get(state.record.pane_id)
            self.sim.log(f"  open restart: {state.record}; deadline {state.deadline}; pane {pane}")
            self.sim.violate(f"restart {restart_id} still open after quiescence", kind="restart_stranded")
        if engine.hub.restarts:
            return
        for pane_id, pane in self.sim.server.panes.items():
            if pane.agent is None:
                self.sim.violate(f"{pane_id} left dead")
            # R5: giving up ends the respawns, never the restore (seed 4030): no told exception
            if "remain-on-exit" in pane.options:
                self.sim.violate(f"{pane_id} left with remain-on-exit {pane.options['remain-on-exit']}")

    def tokens_only_for_live(self, engine: Engine) -> None:
        """No live token for an incarnation that no longer runs."""
        for token in self._tokens_of_ended(engine):
            self.sim.violate(
                f"a live token for the dead incarnation {token.pane_id}@{token.incarnation}",
                kind="token_outlives_pane",
            )

    def _tokens_of_ended(self, engine: Engine) -> list[Any]:
        from connectd.tmux.watcher import token_of

        live = {
            token_of(self.sim.server.info(p)) for p in self.sim.server.panes.values() if p.agent is not None
        }
        return [
            token
            for token in engine.hub.book.tokens.values()
            if token.state is TokenState.LIVE
            and token.incarnation not in live
            and grants.authenticate_or_none(engine.hub.book, token.token_hash) is not None
        ]


class FailureLog(logging.Handler):
    """No unhandled exception: a supervised task may fail only with an injected fault."""

    def __init__(self, sim: Sim) -> None:
        super().__init__(logging.WARNING)
        self.sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.levelno >= logging.ERROR:
            self.sim.violate(f"bug in a task: {record.getMessage()[:300]}")
        elif len(args) == 4 and str(args[2]) not in EXPECTED_TASK_ERRORS and "failed" in record.msg:
            self.sim.violate(f"task failed with an unexpected error: {record.getMessage()[:300]}")


def _body(text: str) -> str | None:
    from tests.simulation.driver import BODY

    found = BODY.search(text)
    return found.group(0) if found else None


__all__ = ["Checker", "FailureLog", "H"]


def _handle_unresolved(engine: Engine, message: Message) -> bool:
    """The message names its recipient by a handle that resolves to no live pane, or to several."""
    if message.handle is None:
        return False
    try:
        D.resolve(engine.watcher.directory, message.handle)
    except D.TargetError:
        return True
    return False
