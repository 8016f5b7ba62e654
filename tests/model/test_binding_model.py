"""A model of session binding over the grant book (connectcore.grants): launches with a person's
grant, control started and stopped, panes closing, resumes, and bindings from evidence naming any
session (control's included), driven in any order by Hypothesis (issue 21.1)."""

from __future__ import annotations

import contextlib
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from connectcore import grants
from connectcore._machine import ConnectError
from connectcore.grants import CONTROL_SCOPES, PRESET_SCOPES, GrantBook, GrantError, Preset, Scope
from connectcore.hub import acts as hub_acts

SESSIONS = [("codex", f"s{i}") for i in range(4)]
PRESETS = [Preset.OBSERVE, Preset.COLLABORATE]


class BindingModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book = GrantBook()
        self.now = 0.0
        self.n = 0
        self.given: dict[str, frozenset[Scope]] = {}  # token -> what the person gave it at launch
        self.person_set: dict[tuple[str, str], set[Scope]] = {}  # session -> every scope the person set on it
        self.controls: set[str] = set()  # principals the person started as control and has not stopped

    def _tick(self) -> None:
        self.now += 1.0
        self.n += 1

    @rule(preset=st.sampled_from(PRESETS), session=st.none() | st.sampled_from(SESSIONS), control=st.booleans())
    def launch(self, preset: Preset, session: tuple[str, str] | None, control: bool) -> None:
        """The person launches (or resumes ``session``) an agent, or starts control."""
        self._tick()
        try:
            hub_acts.check_launch(self.book, control=control, session=session)
        except ConnectError:  # a second control while one runs: refused
            return
        runs_as = hub_acts.launches_control(self.book, control=control, session=session)
        token = f"t{self.n}"
        self.book, principal, _ = grants.issue_token(
            self.book, now=self.now, token_hash=token, principal_id=f"p{self.n}", harness="codex",
            pane_id=f"%{self.n}", pid=self.n, incarnation=f"i{self.n}",
            scopes=frozenset() if runs_as is not None else PRESET_SCOPES[preset], session=session,
            control=runs_as == "",
        )
        if runs_as is not None:
            self.controls.add(grants.canonical(self.book, principal.id))
        self.given[token] = CONTROL_SCOPES if runs_as is not None else PRESET_SCOPES[preset]
        root = self.book.principals[grants.canonical(self.book, principal.id)]
        if runs_as is None and root.session is not None:  # a resume: the person sets the session's grant
            self.person_set.setdefault(root.session, set()).update(PRESET_SCOPES[preset])

    @rule(data=st.data(), session=st.sampled_from(SESSIONS))
    def bind(self, data: st.DataObject, session: tuple[str, str]) -> None:
        """Evidence (any file or answer) names ``session`` for some pane's principal."""
        if not self.book.principals:
            return
        self._tick()
        pid = data.draw(st.sampled_from(sorted(self.book.principals)))
        owner = self.book.aliases.get(session)
        root = grants.canonical(self.book, owner) if owner is not None else None
        runs = root is not None and root != grants.canonical(self.book, pid) and any(
            t.state is grants.TokenState.LIVE and grants.canonical(self.book, t.principal) == root
            for t in self.book.tokens.values()
        )
        before = self.book
        with contextlib.suppress(GrantError):  # a refused binding changes nothing
            self.book, _ = grants.bind_session(self.book, now=self.now, principal_id=pid, session=session)
        if runs:  # Claim: evidence never binds a principal to a session another live principal runs
            assert self.book is before, (pid, session, root)

    @rule(data=st.data())
    def pane_closes(self, data: st.DataObject) -> None:
        if not self.book.tokens:
            return
        self._tick()
        inc = data.draw(st.sampled_from(sorted({t.incarnation for t in self.book.tokens.values()})))
        self.book, _ = grants.end_incarnation(self.book, now=self.now, incarnation=inc)

    @rule(data=st.data())
    def stop_or_revoke(self, data: st.DataObject) -> None:
        """``control stop`` (or Off for an ordinary agent)."""
        if not self.book.principals:
            return
        self._tick()
        pid = data.draw(st.sampled_from(sorted(self.book.principals)))
        self.controls.discard(grants.canonical(self.book, pid))
        self.book, _ = grants.revoke(self.book, now=self.now, principal_id=pid)

    @rule(session=st.sampled_from(SESSIONS), preset=st.sampled_from(PRESETS))
    def person_sets_grant(self, session: tuple[str, str], preset: Preset) -> None:
        self._tick()
        self.book, _ = grants.set_grant(self.book, now=self.now, session=session, scopes=PRESET_SCOPES[preset])
        self.person_set.setdefault(session, set()).update(PRESET_SCOPES[preset])

    @invariant()
    def binding_never_raises_a_grant(self) -> None:
        """Claim: no sequence of binding, merge, rebinding, resume and control stop gives any principal
        other than the running control agent's the act scope, or any token a scope the person did not grant it."""
        for pid in self.book.principals:
            root = grants.canonical(self.book, pid)
            if Scope.ACT in grants.scopes_of(self.book, pid):
                assert root in self.controls, (pid, root)
        for token in self.book.tokens.values():
            if token.state is not grants.TokenState.LIVE:
                continue
            root = self.book.principals[grants.canonical(self.book, token.principal)]
            allowed = set(self.given[token.token_hash])
            if root.session is not None:
                allowed |= self.person_set.get(root.session, set())
            assert grants.scopes_of(self.book, root.id) <= allowed, (token, root)


TestBindingModel = BindingModel.TestCase
TestBindingModel.settings = settings(
    max_examples=int(os.environ.get("CONNECT_MODEL_EXAMPLES", "150")), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
