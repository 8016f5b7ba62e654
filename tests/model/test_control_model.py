"""A model of control's acts (connectcore.control): a person answering cards, a pane whose question
changes, a guard under the send lock, control revoked, driven in any order by Hypothesis."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connectcore import control as C
from connectcore._machine import TransitionNotAllowed

# send_keys carries the question rule: weighted so that most runs exercise it.
TOOLS = [C.Tool.SEND_KEYS, C.Tool.SEND_KEYS, C.Tool.SEND_KEYS, C.Tool.LAUNCH_AGENT, C.Tool.RESUME_SESSION, C.Tool.HANDOFF, C.Tool.SHELL_TEXT, C.Tool.CLOSE_PANE]
QUESTIONS = ["q-allow-tool", "q-menu"]


class ControlModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.acts: dict[str, C.Act] = {}
        self.approved: set[str] = set()  # acts a person approved (the model's own record)
        self.executed: dict[str, str | None] = {}  # act -> the question on screen when it ran
        self.screen: dict[str, str | None] = {"%1": "q-allow-tool", "%2": None}
        self.incarnation: dict[str, str] = {"%1": "inc-1", "%2": "inc-2"}
        self.finals: dict[str, int] = {}
        self.ran_in: dict[str, str] = {}  # act -> the pane's incarnation when it ran

    def _step(self, act_id: str, event: str, detail: str = "") -> None:
        act = self.acts[act_id]
        if not C.ACT_TABLE.allows(act.state, event):
            try:
                C.advance(act, event, now=self.now)
            except TransitionNotAllowed:
                return
            raise AssertionError(f"{event} from {act.state} should be refused")
        after = C.advance(act, event, now=self.now, detail=detail)
        if after.is_final:
            self.finals[act_id] = self.finals.get(act_id, 0) + 1
        self.acts[act_id] = after

    @rule(tool=st.sampled_from(TOOLS), pane=st.sampled_from(["%1", "%1", "%2"]))
    def propose(self, tool: C.Tool, pane: str) -> None:
        question = self.screen[pane] or ""
        if tool is C.Tool.SEND_KEYS and not question:
            return
        act_id = f"a{len(self.acts)}"
        self.acts[act_id] = C.propose(
            act_id=act_id, tool=tool, principal="ctl", pane_id=pane, incarnation=self.incarnation[pane],
            shown=f"{tool.value} on {pane}", args={}, question_fingerprint=question if tool is C.Tool.SEND_KEYS else "",
            now=self.now, card_ttl=60.0,
        )

    @precondition(lambda self: self.acts)
    @rule(data=st.data(), answer=st.sampled_from(["approve", "approve", "decline"]))
    def person_answers(self, data: st.DataObject, answer: str) -> None:
        act_id = data.draw(st.sampled_from(sorted(self.acts)))
        if answer == "approve" and self.acts[act_id].state is C.ActState.AWAITING_CONSENT:
            self.approved.add(act_id)
        self._step(act_id, answer)

    @rule(pane=st.sampled_from(["%1", "%2"]), question=st.sampled_from([*QUESTIONS, None]))
    def screen_changes(self, pane: str, question: str | None) -> None:
        self.screen[pane] = question

    @rule(pane=st.sampled_from(["%1", "%2"]))
    def pane_restarts(self, pane: str) -> None:
        self.incarnation[pane] += "'"

    @precondition(lambda self: self.acts)
    @rule(data=st.data())
    def guard_tries_any_act(self, data: st.DataObject) -> None:
        """The shell's guard asked for any act: the table refuses to attempt one not approved."""
        self._guard(data.draw(st.sampled_from(sorted(self.acts))))

    @precondition(lambda self: any(a.state is C.ActState.APPROVED for a in self.acts.values()))
    @rule(data=st.data())
    def guard_runs_an_approved_act(self, data: st.DataObject) -> None:
        self._guard(data.draw(st.sampled_from(sorted(a for a, act in self.acts.items() if act.state is C.ActState.APPROVED))))

    @precondition(lambda self: any(a.state is C.ActState.AWAITING_CONSENT for a in self.acts.values()))
    @rule(data=st.data())
    def person_approves_an_open_card(self, data: st.DataObject) -> None:
        act_id = data.draw(st.sampled_from(sorted(a for a, act in self.acts.items() if act.state is C.ActState.AWAITING_CONSENT)))
        self.approved.add(act_id)
        self._step(act_id, "approve")

    def _guard(self, act_id: str) -> None:
        """Under the send lock: attempt, read the pane, report what it saw."""
        self._step(act_id, "attempt")
        act = self.acts[act_id]
        if act.state is not C.ActState.GUARDING:
            return
        event = C.guard(act, incarnation=self.incarnation[act.pane_id], question_fingerprint=self.screen[act.pane_id])
        if event == "guard_pass":
            self.executed[act_id] = self.screen[act.pane_id]
            self.ran_in[act_id] = self.incarnation[act.pane_id]
        self._step(act_id, event)
        if event == "guard_pass":
            self._step(act_id, "executed")

    @rule(seconds=st.floats(min_value=0, max_value=40))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for act_id, act in list(self.acts.items()):
            if act.state is C.ActState.AWAITING_CONSENT and self.now >= act.expires_at:
                self._step(act_id, "expire")

    @rule(really=st.integers(0, 3))
    def control_revoked(self, really: int) -> None:
        if really:  # a revocation is one outcome in four of this rule, so acts live long enough to run
            return
        for act_id, act in list(self.acts.items()):
            if C.ACT_TABLE.allows(act.state, "cancel"):
                self._step(act_id, "cancel")

    @invariant()
    def no_act_without_its_card(self) -> None:
        """Claim: every act that ran was approved by the person on its card first."""
        assert set(self.executed) <= self.approved

    @invariant()
    def a_stale_question_is_never_answered(self) -> None:
        """Claim: keys were pressed only while the pane showed the very question their card showed."""
        for act_id, question in self.executed.items():
            act = self.acts[act_id]
            if act.tool is C.Tool.SEND_KEYS:
                assert question == act.question_fingerprint

    @invariant()
    def an_act_runs_only_in_the_incarnation_its_card_showed(self) -> None:
        """Claim: nothing runs in a process that replaced the one the person approved the act for."""
        for act_id, incarnation in self.ran_in.items():
            assert incarnation == self.acts[act_id].incarnation

    @invariant()
    def done_means_executed_and_every_act_ends_once(self) -> None:
        """Claim: an act is done exactly when it ran, and reaches at most one final state."""
        assert {a for a, act in self.acts.items() if act.state is C.ActState.DONE} == set(self.executed)
        assert all(n == 1 for n in self.finals.values())


TestControlModel = ControlModel.TestCase
TestControlModel.settings = settings(
    max_examples=int(os.environ.get("CONNECT_MODEL_EXAMPLES", "150")), stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
