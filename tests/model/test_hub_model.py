"""Joint model of grants + consent + delivery: several agents, revocations and incarnation changes
interleaved with idle transitions, guards, typing and the passing of time."""

from __future__ import annotations

import contextlib
import os
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connectcore import grants
from connectcore import hub as H
from connectcore.consent import Decision
from connectcore.delivery import FINAL, Limits, MessageState
from connectcore.effects import CheckGuard, ConfirmTyping, Persist, TypeText
from connectcore.grants import PRESET_SCOPES, Preset
from tests.unit.hubkit import confirming

NAMES = ("a", "b", "c")
TEXTS = st.sampled_from(["hello", "two\nlines", "bad\x1bescape", "", "x" * 400, "ünïcödé"])
IDS = st.sampled_from(["m1", "m2", "m3", "bad id"])


class HubModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        limits = Limits(hop_limit=2, sender_per_window=6, pair_per_window=4, max_message_bytes=500, live_ids_per_principal=5)
        self.hub = H.Hub(limits=limits)
        self.now = 0.0
        self.n = 0
        self.events: list[H.Event] = []
        self.typed: Counter[tuple[str, str]] = Counter()
        self.finals: Counter[tuple[tuple[str, str], float]] = Counter()
        self.admitted: dict[tuple[str, str], float] = {}  # key -> expiry, while the model says it is reserved
        self.revoked_at: dict[str, float] = {}  # principal -> when
        self.dead_incarnations: set[str] = set()
        self.pending_guards: list[CheckGuard] = []
        self.pending_typing: list[ConfirmTyping] = []
        self.agents: dict[str, dict[str, str]] = {}
        self.counters_before_bind: dict[str, int] = {}
        for name in NAMES:
            self._launch(name, session=("claude", f"s-{name}") if name == "a" else None)

    # --- plumbing ---------------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def apply(self, event: H.Event) -> tuple[object, ...]:
        self.events.append(event)
        self.hub, effects = H.step(self.hub, event)
        for effect in effects:
            if isinstance(effect, TypeText):
                assert effect.message is not None
                self.typed[effect.message] += 1
                message = self.hub.messages[effect.message]
                # nothing admitted before a revocation of either end is typed after it
                for end in (message.sender, message.recipient_principal):
                    assert end is None or end not in self.revoked_at or self.revoked_at[end] > message.created_at
                # never typed into a pane whose incarnation ended
                assert effect.incarnation not in self.dead_incarnations
            elif isinstance(effect, CheckGuard):
                self.pending_guards.append(effect)
            elif isinstance(effect, ConfirmTyping):
                self.pending_typing.append(effect)
            elif isinstance(effect, Persist) and effect.kind == "message" and effect.record.state in FINAL:
                self.finals[(effect.record.key, effect.record.created_at)] += 1
        return effects

    def _launch(self, name: str, session: tuple[str, str] | None = None, pane: str | None = None) -> None:
        token, principal, inc = self.fresh("tok"), self.fresh("p"), self.fresh("inc")
        pane = pane or f"%{NAMES.index(name) + 1}"
        self.apply(H.Launch(self.now, token, principal, "claude", pane, self.n, inc, PRESET_SCOPES[Preset.COLLABORATE], session))
        self.agents[name] = {"token": token, "principal": grants.authenticate(self.hub.book, token).id, "pane": pane, "inc": inc}

    # --- rules ------------------------------------------------------------------------------------

    @rule(sender=st.sampled_from(NAMES), to=st.sampled_from(NAMES), mid=IDS, text=TEXTS, reply=st.booleans())
    def send(self, sender: str, to: str, mid: str, text: str, reply: bool) -> None:
        s, r = self.agents[sender], self.agents[to]
        in_reply_to = None
        if reply:
            received = [m.ref for m in self.hub.messages.values() if m.recipient_principal == s["principal"]]
            in_reply_to = received[0] if received else "r-none"
        before = self.hub
        event = H.Submit(self.now, s["token"], mid, text, H.Recipient(r["pane"], r["inc"], "claude"), self.fresh("r"), self.fresh("card"), in_reply_to)
        last = self.hub.last_received.get(s["principal"])
        try:
            self.apply(event)
        except H.CallRefused:
            assert self.hub is before  # a refused call stores nothing
            return
        key = (grants.authenticate(self.hub.book, s["token"]).id, mid)
        assert key not in self.admitted
        self.admitted[key] = self.now + self.hub.limits.id_ttl
        message = self.hub.messages[key]
        if last is not None and self.now - last[2] <= self.hub.limits.reply_window:
            # a new conversation cannot reset the hop count
            assert message.hop == last[1] + 1

    @rule(decision=st.sampled_from(list(Decision)), pick=st.integers(0, 5))
    def decide(self, decision: Decision, pick: int) -> None:
        open_cards = sorted(c.id for c in self.hub.cards.values() if c.state.value == "pending")
        if open_cards:
            self.apply(H.Decide(self.now, open_cards[pick % len(open_cards)], decision))

    @rule(name=st.sampled_from(NAMES), ready=st.booleans(), fp=st.sampled_from(["f1", "f2"]))
    def observe(self, name: str, ready: bool, fp: str) -> None:
        a = self.agents[name]
        self.apply(H.PaneObserved(self.now, a["pane"], a["inc"], ready, fp, self.now))

    @precondition(lambda self: self.pending_guards)
    @rule(same=st.booleans(), ready=st.booleans())
    def answer_guard(self, same: bool, ready: bool) -> None:
        guard = self.pending_guards.pop(0)
        live = {a["pane"]: a["inc"] for a in self.agents.values()}
        view = self.hub.panes.get(guard.pane_id)
        fp = view.fingerprint if (view is not None and same) else "changed"
        self.apply(H.GuardObserved(self.now, guard.message, live.get(guard.pane_id), ready, fp, self.now, card_id=self.fresh("card")))

    @precondition(lambda self: self.pending_typing)
    @rule(landed=st.booleans())
    def answer_typing(self, landed: bool) -> None:
        confirm = self.pending_typing.pop(0)
        self.apply(H.TypingObserved(self.now, confirm.message, confirming(landed, read_at=self.now)))

    @rule(seconds=st.sampled_from([1.0, 30.0, 400.0, 1000.0, 3700.0]))
    def tick(self, seconds: float) -> None:
        # guards and typing are answered under the lock before time moves on
        while self.pending_guards or self.pending_typing:
            if self.pending_typing:
                self.answer_typing(True)
            else:
                self.answer_guard(True, True)
        self.now += seconds
        self.apply(H.Tick(self.now))
        self.admitted = {k: exp for k, exp in self.admitted.items() if exp > self.now}

    @precondition(lambda self: not any(m.state is MessageState.TYPING for m in self.hub.messages.values()))
    @rule(name=st.sampled_from(NAMES))
    def revoke(self, name: str) -> None:
        principal = self.agents[name]["principal"]
        if principal in self.revoked_at:
            return
        self.revoked_at[principal] = self.now
        self.apply(H.Revoke(self.now, principal))
        self.pending_guards = [g for g in self.pending_guards if self.hub.messages[g.message].state is MessageState.GUARDING]

    @precondition(lambda self: not any(m.state is MessageState.TYPING for m in self.hub.messages.values()))
    @rule(name=st.sampled_from(NAMES))
    def recycle_pane(self, name: str) -> None:
        """The agent in a pane exits and a brand-new agent starts in the same pane id."""
        old = self.agents[name]
        self.dead_incarnations.add(old["inc"])
        self.apply(H.PaneGone(self.now, old["pane"], old["inc"]))
        self.pending_guards = [g for g in self.pending_guards if g.incarnation != old["inc"]]
        self._launch(name, pane=old["pane"])
        new = self.agents[name]
        # a recycled pane inherits no grant or approval
        assert not any(p[1] == new["inc"] for p in self.hub.pairs)
        assert new["principal"] != old["principal"]

    @rule(name=st.sampled_from(["b", "c"]))
    def bind(self, name: str) -> None:
        a = self.agents[name]
        principal = self.hub.book.principals[a["principal"]]
        if principal.session is not None or a["principal"] in self.revoked_at:
            return
        sent_before = len(self.hub.sent.get(a["principal"], ()))
        pairs_before = {p for p in self.hub.pairs if p[0] == a["principal"]}
        ids_before = {k for k in self.hub.messages if k[0] == a["principal"]}
        self.apply(H.BindSession(self.now, a["principal"], ("claude", f"s-{name}-{self.n}")))
        # rebinding resets no per-principal counter or approval
        assert len(self.hub.sent.get(a["principal"], ())) == sent_before
        assert pairs_before <= self.hub.pairs
        assert ids_before <= set(self.hub.messages)

    # --- invariants -------------------------------------------------------------------------------

    @invariant()
    def at_most_one_typing_attempt_per_message(self) -> None:
        """At most one typing attempt per (principal, id)."""
        assert all(n == 1 for n in self.typed.values())

    @invariant()
    def at_most_one_final_outcome_per_message(self) -> None:
        """Each admitted message is recorded final at most once."""
        assert all(n == 1 for n in self.finals.values())

    @invariant()
    def unexpired_ids_are_never_evicted(self) -> None:
        """An unexpired id is never evicted."""
        for key, expiry in self.admitted.items():
            if self.now < expiry:
                assert key in self.hub.messages

    @invariant()
    def queued_messages_never_outlive_their_id(self) -> None:
        """A queued (not yet final, not being typed) message is always inside its id's hour."""
        for message in self.hub.messages.values():
            if not message.is_final and message.state is not MessageState.TYPING and message.state is not MessageState.GUARDING:
                assert self.now < message.expires_at

    @invariant()
    def open_cards_belong_to_waiting_messages(self) -> None:
        """Every pending card's message is waiting for consent."""
        for card in self.hub.cards.values():
            if card.state.value == "pending":
                assert self.hub.messages[card.message].state is MessageState.AWAITING_CONSENT

    @invariant()
    def one_attempt_per_pane(self) -> None:
        """At most one message per pane is being guarded or typed, and the hub knows which."""
        busy = Counter(m.recipient_pane for m in self.hub.messages.values() if m.state in (MessageState.GUARDING, MessageState.TYPING))
        assert all(n <= 1 for n in busy.values())
        for pane, key in self.hub.attempts.items():
            assert self.hub.messages[key].recipient_pane == pane

    def teardown(self) -> None:
        # every admitted message reaches exactly one final outcome once time passes its hour
        self.tick(3700.0)
        self.tick(3700.0)
        assert not self.hub.messages
        typed_keys = set(self.typed)
        assert {key for key, _created in self.finals} >= typed_keys
        # replaying the same events gives the same states and effects
        replay = H.Hub(limits=self.hub.limits)
        for event in self.events:
            with contextlib.suppress(H.CallRefused):
                replay, _ = H.step(replay, event)
        assert replay == self.hub


TestHubModel = HubModel.TestCase
# make mutation runs every mutant against this model; CONNECT_MODEL_EXAMPLES keeps that affordable.
TestHubModel.settings = settings(
    max_examples=int(os.environ.get("CONNECT_MODEL_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
