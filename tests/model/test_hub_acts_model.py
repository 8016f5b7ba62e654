"""A stateful model of control's acts in the hub: any order of proposals, answers, guards, screen
changes, replaced panes, revocations, expiry and daemon restarts.

Claims: no act runs without the person's approval on its card; keys are pressed only while the pane
shows the question the card showed, in the process the card named, while control is connected; an
act runs at most once, across daemon restarts too; a refused proposal changes nothing.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connectcore import control as C
from connectcore import grants
from connectcore import hub as H
from connectcore.effects import ClosePane, Effect, PressKeys, TypeShellText
from connectcore.grants import Preset
from tests.unit.hubkit import Agent, World

QUESTIONS: list[tuple[str, tuple[str, ...], tuple[str, ...], int | None] | None] = [
    ("Allow tool send_message?", ("1. Yes", "2. No"), ("send_message",), 0),
    ("Allow tool close_pane?", ("1. Yes", "2. No"), ("close_pane",), 0),
    None,
]
RUNS = (PressKeys, TypeShellText, ClosePane)


class HubActsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.w = World()
        self.ctl: Agent = self.w.launch("ctl", Preset.OFF, control=True)
        self.pure: Agent = self.w.launch("pure", Preset.OFF, harness="codex")
        self.shell = Agent("sh", "", "", "%9", "inc-sh", "shell")
        self.question = QUESTIONS[0]
        self.approved: set[str] = set()
        self.runs: dict[str, int] = {}
        self.generation = 0

    def _step(self, event: H.Event) -> tuple[Effect, ...]:
        effects = self.w.step(event)
        for e in effects:
            if isinstance(e, RUNS):
                self.runs[e.act] = self.runs.get(e.act, 0) + 1
                self._check_run(e)
        return effects

    def _check_run(self, e: Any) -> None:
        act = self.w.hub.acts[e.act]
        assert e.act in self.approved, "an act ran without the person's approval"
        assert grants.live_tokens(self.w.hub.book, act.principal), "an act ran for a control no longer connected"
        if isinstance(e, PressKeys):
            assert act.incarnation == self.pure.incarnation, "keys pressed into another process"
            asked = C.question_fingerprint(*self.question) if self.question else ""
            assert asked == act.question_fingerprint, "a stale question was answered"

    @rule(tool=st.sampled_from([C.Tool.SEND_KEYS, C.Tool.SHELL_TEXT, C.Tool.CLOSE_PANE]), keys=st.sampled_from([["1"], ["C-c"], []]))
    def propose(self, tool: C.Tool, keys: list[str]) -> None:
        target = self.shell if tool is C.Tool.SHELL_TEXT else self.pure
        recipient = H.Recipient(target.pane, target.incarnation, target.harness)
        args = {"keys": keys} if tool is C.Tool.SEND_KEYS else {"text": "make test"} if tool is C.Tool.SHELL_TEXT else {}
        before = self.w.hub
        try:
            self._step(H.ActProposed(self.w.now, self.ctl.token, self.w.fresh("act-"), tool, recipient, args, self.question))
        except H.CallRefused:
            assert self.w.hub is before, "a refused proposal changed the hub"

    @precondition(lambda self: any(a.state is C.ActState.AWAITING_CONSENT for a in self.w.hub.acts.values()))
    @rule(data=st.data(), approve=st.booleans())
    def person_answers(self, data: st.DataObject, approve: bool) -> None:
        open_ = sorted(a.id for a in self.w.hub.acts.values() if a.state is C.ActState.AWAITING_CONSENT)
        act_id = data.draw(st.sampled_from(open_))
        if approve:
            self.approved.add(act_id)
        self._step(H.ActDecided(self.w.now, act_id, approve))

    @precondition(lambda self: any(a.state is C.ActState.GUARDING for a in self.w.hub.acts.values()))
    @rule(data=st.data())
    def guard_reads_the_pane(self, data: st.DataObject) -> None:
        guarding = sorted(a.id for a in self.w.hub.acts.values() if a.state is C.ActState.GUARDING)
        act = self.w.hub.acts[data.draw(st.sampled_from(guarding))]
        if act.pane_id == self.pure.pane:
            self._step(H.ActGuarded(self.w.now, act.id, self.pure.incarnation, self.question))
        else:
            self._step(H.ActGuarded(self.w.now, act.id, self.shell.incarnation, at_empty_prompt=True))

    @precondition(lambda self: any(a.state is C.ActState.EXECUTING for a in self.w.hub.acts.values()))
    @rule(data=st.data(), ok=st.booleans())
    def execution_reports(self, data: st.DataObject, ok: bool) -> None:
        running = sorted(a.id for a in self.w.hub.acts.values() if a.state is C.ActState.EXECUTING)
        self._step(H.ActExecuted(self.w.now, data.draw(st.sampled_from(running)), error="" if ok else "tmux failed"))

    @rule(question=st.sampled_from(QUESTIONS))
    def the_screen_changes(self, question: tuple[str, tuple[str, ...]] | None) -> None:
        self.question = question

    @rule()
    def the_pure_agent_is_replaced(self) -> None:
        self._step(H.PaneGone(self.w.now, self.pure.pane, self.pure.incarnation))
        self.generation += 1
        self.pure = Agent("pure", "", "", self.pure.pane, f"inc-pure-{self.generation}", "codex")

    @rule()
    def control_is_stopped_and_started_again(self) -> None:
        self._step(H.Revoke(self.w.now, self.ctl.principal))
        self.ctl = self.w.launch(self.w.fresh("ctl"), Preset.OFF, control=True)

    @rule(seconds=st.floats(min_value=0, max_value=1000))
    def time_passes(self, seconds: float) -> None:
        self.w.now += seconds
        self._step(H.Tick(self.w.now))

    @rule()
    def the_daemon_restarts(self) -> None:
        hub = self.w.hub
        self.w.hub = H.restore(hub.book, (), (), (), hub.limits, [a for a in hub.acts.values() if not a.is_final])
        self._step(H.Recover(self.w.now))

    @invariant()
    def an_act_runs_at_most_once(self) -> None:
        assert all(n == 1 for n in self.runs.values()), self.runs

    @invariant()
    def done_only_after_it_ran(self) -> None:
        for act in self.w.hub.acts.values():
            if act.state in (C.ActState.DONE, C.ActState.EXECUTING):
                assert act.id in self.runs


TestHubActsModel = HubActsModel.TestCase
TestHubActsModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
