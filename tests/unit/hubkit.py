"""A small driver for the hub in tests: agents launched into panes, events stepped, effects kept."""

from __future__ import annotations

import copy
import copyreg
import itertools
from dataclasses import dataclass, field
from types import MappingProxyType

from connectcore import hub as H
from connectcore.consent import Decision
from connectcore.delivery import AfterTyping, Limits, MessageState
from connectcore.effects import Audit, CheckGuard, Effect, Notify, Persist
from connectcore.grants import PRESET_SCOPES, Preset, Scope
from connectcore.screen import Activity, Composer

# The core keeps read-only mappings (an act's arguments) in MappingProxyType; a snapshot copies them as
# what they are, a read-only view of a copied dict.
copyreg.pickle(MappingProxyType, lambda m: (MappingProxyType, (dict(m),)))


def confirming(
    landed: bool = True,
    *,
    read_at: float,
    fingerprint: str = "",
    busy: bool = False,
    draft: bool = False,
    answered: bool = False,
) -> AfterTyping:
    """A confirming re-read after typing: the marker seen (``landed``), busy or idle, a draft or not,
    the agent's answer below the marker or not."""
    composer = Composer.DRAFT if draft else Composer.EMPTY
    activity = Activity.BUSY if busy else Activity.IDLE
    ready = not busy and not draft
    return AfterTyping(landed, activity, composer, ready, fingerprint, read_at, answered=answered and ready)


@dataclass
class Agent:
    name: str
    token: str
    principal: str
    pane: str
    incarnation: str
    harness: str = "claude"


@dataclass
class World:
    hub: H.Hub = field(default_factory=H.Hub)
    now: float = 1000.0
    effects: list[Effect] = field(default_factory=list)
    agents: dict[str, Agent] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    def with_limits(cls, **kw: float) -> World:
        return cls(hub=H.Hub(limits=Limits(**kw)))  # type: ignore[arg-type]

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def step(self, event: H.Event) -> tuple[Effect, ...]:
        """Step the hub; whether the step returns or raises, the hub it was given is left unchanged."""
        given, kept = self.hub, copy.deepcopy(self.hub)
        try:
            self.hub, effects = H.step(given, event)
        finally:
            assert given == kept, f"stepping {type(event).__name__} changed the hub it was given"
        self.effects.extend(effects)
        return effects

    def snapshot(self) -> H.Hub:
        """A deep copy of the hub: after a refused step ``w.hub`` is still the very object ``before = w.hub``
        names, so only a copy can show that nothing was stored."""
        return copy.deepcopy(self.hub)

    def launch(
        self,
        name: str,
        preset: Preset = Preset.COLLABORATE,
        *,
        harness: str = "claude",
        session: tuple[str, str] | None = None,
        pane: str | None = None,
        control: bool = False,
        scopes: frozenset[Scope] | None = None,
    ) -> Agent:
        pane = pane or f"%{len(self.agents) + 1}"
        agent = Agent(name, self.fresh("tok-"), self.fresh("p-"), pane, self.fresh("inc-"), harness)
        self.step(
            H.Launch(
                self.now,
                agent.token,
                agent.principal,
                harness,
                pane,
                4000 + len(self.agents),
                agent.incarnation,
                scopes if scopes is not None else PRESET_SCOPES[preset],
                session,
                control,
            )
        )
        principal = H.grants.authenticate(self.hub.book, agent.token) if (scopes or PRESET_SCOPES[preset] or control) else None
        if principal is not None:
            agent.principal = principal.id
        self.agents[name] = agent
        return agent

    def send(self, sender: Agent, to: Agent, text: str = "hello", message_id: str | None = None, **kw: object) -> tuple[str, str]:
        message_id = message_id or self.fresh("m")
        self.step(
            H.Submit(
                self.now,
                sender.token,
                message_id,
                text,
                H.Recipient(to.pane, to.incarnation, str(kw.pop("kind", to.harness)), kw.pop("handle", None)),  # type: ignore[arg-type]
                self.fresh("r"),
                self.fresh("card"),
                kw.pop("in_reply_to", None),  # type: ignore[arg-type]
            )
        )
        return (sender.principal, message_id)

    def message(self, key: tuple[str, str]) -> H.Message:
        return self.hub.messages[key]

    def card_of(self, key: tuple[str, str]) -> str:
        card = self.hub.messages[key].card
        assert card is not None
        return card

    def decide(self, key: tuple[str, str], decision: Decision = Decision.APPROVE_PAIR) -> tuple[Effect, ...]:
        return self.step(H.Decide(self.now, self.card_of(key), decision))

    def idle(
        self, agent: Agent, fingerprint: str = "fp-idle", ready: bool = True, read_at: float | None = None
    ) -> tuple[Effect, ...]:
        at = self.now if read_at is None else read_at
        return self.step(H.PaneObserved(self.now, agent.pane, agent.incarnation, ready, fingerprint, at))

    def guard(self, key: tuple[str, str], agent: Agent, fingerprint: str = "fp-idle", ready: bool = True, **kw: object) -> tuple[Effect, ...]:
        incarnation = kw.pop("incarnation", agent.incarnation)
        read_at = kw.pop("read_at", self.now)
        return self.step(H.GuardObserved(self.now, key, incarnation, ready, fingerprint, read_at, card_id=self.fresh("card"), **kw))  # type: ignore[arg-type]

    def typed(
        self,
        key: tuple[str, str],
        landed: bool = True,
        fingerprint: str = "",
        *,
        busy: bool = False,
        draft: bool = False,
        answered: bool = False,
        read_at: float | None = None,
    ) -> tuple[Effect, ...]:
        at = self.now if read_at is None else read_at
        reading = confirming(landed, read_at=at, fingerprint=fingerprint, busy=busy, draft=draft, answered=answered)
        return self.step(H.TypingObserved(self.now, key, reading))

    def deliver(self, key: tuple[str, str], to: Agent) -> tuple[Effect, ...]:
        """Drive an approved message through idle, guard and typing."""
        effects = self.idle(to)
        effects += self.guard(key, to)
        effects += self.typed(key)
        return effects

    def tick(self, seconds: float = 0.0) -> tuple[Effect, ...]:
        self.now += seconds
        return self.step(H.Tick(self.now))


def actor(w: World, agent: Agent) -> str:
    return H.grants.actor_name(w.hub.book.principals[agent.principal])


def final_effects(w: World, key: tuple[str, str], outcome: str, reason: str) -> tuple[object, ...]:
    """What _finalize emits for a message with no open card: persist, audit, wake the sender."""
    done = w.message(key)
    assert done.outcome == outcome and done.reason == reason and done.final_at == w.now
    return (
        Persist("message", key, done),
        Audit(
            actor=done.sender_actor,
            action="send_message",
            outcome=outcome,
            scope="message",
            target=f"{done.recipient_pane}@{done.recipient_incarnation}",
            message_id=key[1],
            detail=reason,
            at=w.now,
        ),
        Notify("message", key, principal=key[0], payload={"outcome": outcome}),
    )


def guarding(
    w: World, a: Agent, b: Agent, decision: Decision = Decision.APPROVE_PAIR, **kw: object
) -> tuple[str, str]:
    """A consented message to b whose guard is out (CheckGuard emitted)."""
    key = w.send(a, b, **kw)
    w.decide(key, decision)
    assert [type(e) for e in w.idle(b)] == [CheckGuard]
    assert w.message(key).state is MessageState.GUARDING
    return key
