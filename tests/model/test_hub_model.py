"""Joint model of grants + consent + delivery: several agents, revocations and incarnation changes
interleaved with idle transitions, guards, typing and the passing of time.

A message is identified by its key *and* the moment it was admitted: an id is free again after its
hour, so ``(principal, id)`` alone names several messages over a run. Every per-message count below
(typing attempts, final outcomes, admissions) is keyed ``((principal, id), created_at)``.
"""

from __future__ import annotations

import contextlib
import copy
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
        # one message = ((principal, id), created_at), as the hub admitted it
        self.typed: Counter[tuple[tuple[str, str], float]] = Counter()
        self.finals: Counter[tuple[tuple[str, str], float]] = Counter()
        self.admissions: set[tuple[tuple[str, str], float]] = set()
        self.admitted: dict[tuple[str, str], float] = {}  # key -> expiry, while the model says it is reserved
        self.revoked_at: dict[str, float] = {}  # principal (and every principal merged with it) -> when
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
                self.check_typing(effect)
            elif isinstance(effect, CheckGuard):
                self.pending_guards.append(effect)
            elif isinstance(effect, ConfirmTyping):
                self.pending_typing.append(effect)
            elif isinstance(effect, Persist) and effect.kind == "message" and effect.record.state in FINAL:
                self.finals[(effect.record.key, effect.record.created_at)] += 1
        return effects

    def check_typing(self, effect: TypeText) -> None:
        """Nothing is typed for a revoked end's message, nor into an ended incarnation; each typing is counted."""
        assert effect.message is not None
        message = self.hub.messages[effect.message]
        self.typed[(message.key, message.created_at)] += 1
        # every typing happens now, at or after any revocation already recorded: a message whose
        # sender or recipient was revoked (before or after it was admitted) must never be typed
        for end in (message.sender, message.recipient_principal):
            assert end is None or end not in self.revoked_at, f"{message.key} typed after {end} was revoked"
        assert effect.incarnation not in self.dead_incarnations

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
        before = copy.deepcopy(self.hub)
        event = H.Submit(self.now, s["token"], mid, text, H.Recipient(r["pane"], r["inc"], "claude"), self.fresh("r"), self.fresh("card"), in_reply_to)
        last = self.hub.last_received.get(s["principal"])
        try:
            self.apply(event)
        except H.CallRefused:
            assert self.hub == before  # a refused call stores nothing (nor changes the hub in place)
            return
        key = (grants.authenticate(self.hub.book, s["token"]).id, mid)
        assert key not in self.admitted
        self.admitted[key] = self.now + self.hub.limits.id_ttl
        message = self.hub.messages[key]
        assert message.created_at == self.now
        self.admissions.add((key, message.created_at))
        if last is not None and self.now - last[2] <= self.hub.limits.reply_window:
            # a new conversation cannot reset the hop count
            assert message.hop == last[1] + 1

    @rule(
        sender=st.sampled_from(NAMES),
        to=st.sampled_from(NAMES),
        mid=st.sampled_from(["m1", "m2", "m3"]),
        decision=st.sampled_from([Decision.APPROVE_ONCE, Decision.APPROVE_PAIR]),
        look=st.booleans(),
    )
    def converse(self, sender: str, to: str, mid: str, decision: Decision, look: bool) -> None:
        """A well-formed message to another agent, approved if it opens a card, and (if ``look``) the
        recipient then seen idle on a new screen: the common path, so that guards and typing are
        reached in most runs (``send``, ``decide`` and ``observe`` explore the rest)."""
        if sender == to:
            return
        self.send(sender, to, mid, "hello", False)
        self._approve((self.agents[sender]["principal"], mid), decision)
        if look:
            self.observe(to, True, self.fresh("screen"))

    def _approve(self, key: tuple[str, str], decision: Decision) -> None:
        message = self.hub.messages.get(key)
        if message is not None and message.card is not None and self.hub.cards[message.card].state.value == "pending":
            self.apply(H.Decide(self.now, message.card, decision))

    @precondition(lambda self: self.hub.last_received)
    @rule(
        pick=st.integers(0, 2),
        to=st.sampled_from(NAMES),
        mid=st.sampled_from(["m1", "m2", "m3"]),
        threaded=st.booleans(),
        decision=st.sampled_from([Decision.APPROVE_ONCE, Decision.APPROVE_PAIR, Decision.DECLINE]),
    )
    def pass_on(self, pick: int, to: str, mid: str, threaded: bool, decision: Decision) -> None:
        """An agent that received a message sends one on (in reply or not), so that the hop count is exercised."""
        receivers = sorted(n for n, a in self.agents.items() if a["principal"] in self.hub.last_received)
        if not receivers:
            return
        sender = receivers[pick % len(receivers)]
        if sender == to:
            return
        self.send(sender, to, mid, "hello", threaded)
        self._approve((self.agents[sender]["principal"], mid), decision)

    @rule(decision=st.sampled_from(list(Decision)), pick=st.integers(0, 5))
    def decide(self, decision: Decision, pick: int) -> None:
        open_cards = sorted(c.id for c in self.hub.cards.values() if c.state.value == "pending")
        if open_cards:
            self.apply(H.Decide(self.now, open_cards[pick % len(open_cards)], decision))

    @rule(name=st.sampled_from(NAMES), ready=st.booleans(), fp=st.sampled_from(["f1", "f2"]))
    def observe(self, name: str, ready: bool, fp: str) -> None:
        a = self.agents[name]
        self.apply(H.PaneObserved(self.now, a["pane"], a["inc"], ready, fp, self.now))

    @rule(name=st.sampled_from(NAMES))
    def settle(self, name: str) -> None:
        """An agent's turn runs and ends: seen busy, then idle on a screen not seen before."""
        self.observe(name, False, self.fresh("busy"))
        self.observe(name, True, self.fresh("screen"))

    @precondition(lambda self: self.pending_guards)
    @rule(same=st.sampled_from([True, True, False]), ready=st.sampled_from([True, True, False]))
    def answer_guard(self, same: bool, ready: bool) -> None:
        guard = self.pending_guards.pop(0)
        live = {a["pane"]: a["inc"] for a in self.agents.values()}
        view = self.hub.panes.get(guard.pane_id)
        fp = view.fingerprint if (view is not None and same) else "changed"
        self.apply(H.GuardObserved(self.now, guard.message, live.get(guard.pane_id), ready, fp, self.now, card_id=self.fresh("card")))

    @precondition(lambda self: self.pending_typing)
    @rule(landed=st.booleans(), answered=st.booleans())
    def answer_typing(self, landed: bool, answered: bool = False) -> None:
        """The confirmation: the marker seen or not; the agent's answer below it or not (a quick turn)."""
        confirm = self.pending_typing.pop(0)
        reading = confirming(landed, read_at=self.now, answered=landed and answered)
        self.apply(H.TypingObserved(self.now, confirm.message, reading))

    @rule(seconds=st.sampled_from([1.0, 30.0, 400.0, 1000.0, 3700.0]), landed=st.booleans())
    def tick(self, seconds: float, landed: bool = True) -> None:
        """Time passes; guards and typing still open are answered first, as under the daemon's lock."""
        while self.pending_guards or self.pending_typing:
            if self.pending_typing:
                self.answer_typing(landed)
            else:
                self.answer_guard(True, True)
        self.now += seconds
        self.apply(H.Tick(self.now))
        self.admitted = {k: exp for k, exp in self.admitted.items() if exp > self.now}

    @precondition(lambda self: not any(m.state is MessageState.TYPING for m in self.hub.messages.values()))
    @rule(name=st.sampled_from(NAMES), now=st.sampled_from([False, False, True]))
    def revoke(self, name: str, now: bool) -> None:
        """The owner revokes an agent (one draw in three, so that messages live long enough to be typed)."""
        principal = self.agents[name]["principal"]
        if not now or principal in self.revoked_at:
            return
        for member in grants.group(self.hub.book, principal):
            self.revoked_at.setdefault(member, self.now)
        self.apply(H.Revoke(self.now, principal))
        self.pending_guards = [g for g in self.pending_guards if self.hub.messages[g.message].state is MessageState.GUARDING]

    @precondition(lambda self: not any(m.state is MessageState.TYPING for m in self.hub.messages.values()))
    @rule(name=st.sampled_from(NAMES), now=st.sampled_from([False, False, True]))
    def recycle_pane(self, name: str, now: bool) -> None:
        """The agent in a pane exits and a brand-new agent starts in the same pane id (one draw in three)."""
        if not now:
            return
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
        """Each admitted message (key and admission time) is typed at most once."""
        assert all(n == 1 for n in self.typed.values()), [k for k, n in self.typed.items() if n > 1]
        assert set(self.typed) <= self.admissions

    @invariant()
    def at_most_one_final_outcome_per_message(self) -> None:
        """Each admitted message (key and admission time) is recorded final at most once."""
        assert all(n == 1 for n in self.finals.values()), [k for k, n in self.finals.items() if n > 1]
        assert set(self.finals) <= self.admissions

    @invariant()
    def unexpired_ids_are_never_evicted(self) -> None:
        """An unexpired id is never evicted."""
        for key in self.admitted:  # only ids still inside their hour (``tick`` drops the others)
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
        """After every hour has passed, each admitted message has one final outcome; a replay gives the same hub."""
        self.tick(3700.0)
        self.tick(3700.0)
        assert not self.hub.messages
        assert set(self.finals) == self.admissions and all(n == 1 for n in self.finals.values())
        replay = H.Hub(limits=self.hub.limits)
        for event in self.events:
            with contextlib.suppress(H.CallRefused):
                replay, _ = H.step(replay, event)
        assert replay == self.hub


# --- scenarios through the same model (each one a path the search above may or may not reach) ------


def _check(model: HubModel) -> None:
    model.at_most_one_typing_attempt_per_message()
    model.at_most_one_final_outcome_per_message()
    model.unexpired_ids_are_never_evicted()
    model.queued_messages_never_outlive_their_id()
    model.open_cards_belong_to_waiting_messages()
    model.one_attempt_per_pane()


def _deliver(model: HubModel, mid: str) -> None:
    """a sends ``mid`` to b, approved; b's turn ends; the guard and the typing are answered as the world would."""
    model.converse("a", "b", mid, Decision.APPROVE_PAIR, look=False)
    model.settle("b")
    model.tick(1.0, landed=True)


def _sender(model: HubModel) -> str:
    return model.agents["a"]["principal"]


def test_an_id_reused_after_its_hour_is_a_new_message_typed_once() -> None:
    """The same id, admitted again after its hour, is a second message: two typings, one each."""
    model = HubModel()
    _deliver(model, "m1")
    model.tick(3700.0)
    _deliver(model, "m1")
    _check(model)
    assert model.typed == Counter({((_sender(model), "m1"), 0.0): 1, ((_sender(model), "m1"), 3701.0): 1})
    model.teardown()


def test_an_unconfirmed_message_is_never_typed_again() -> None:
    """A typing that could not be confirmed ends the message: b idle again does not retype it."""
    model = HubModel()
    model.converse("a", "b", "m1", Decision.APPROVE_PAIR, look=True)
    model.answer_guard(same=True, ready=True)
    model.answer_typing(landed=False)
    _check(model)
    model.settle("b")
    model.tick(1.0, landed=True)
    _check(model)
    assert model.typed == Counter({((_sender(model), "m1"), 0.0): 1})
    model.teardown()


def test_nothing_admitted_before_a_revocation_is_typed_after_it() -> None:
    """A message admitted before either end is revoked is cancelled, never typed, however late b is idle."""
    for revoked in ("b", "a"):
        model = HubModel()
        model.converse("a", "b", "m1", Decision.APPROVE_PAIR, look=False)
        model.tick(30.0)  # the revocation comes later than the admission
        model.revoke(revoked, now=True)
        model.settle("b")
        model.tick(1.0, landed=True)
        assert not model.typed, revoked
        _check(model)
        model.teardown()


TestHubModel = HubModel.TestCase
# make mutation runs every mutant against this model; CONNECT_MODEL_EXAMPLES keeps that affordable.
TestHubModel.settings = settings(
    max_examples=int(os.environ.get("CONNECT_MODEL_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
