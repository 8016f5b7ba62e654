"""The fleet directory against a small model of a tmux server's panes, over random histories."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from connectcore.directory import (
    Directory,
    Evidence,
    EvidenceSource,
    Incarnation,
    PaneObservation,
    SessionBinding,
    TargetError,
    TargetRefusal,
    Unbound,
    Unknown,
    binding,
    note_evidence,
    observe,
    resolve,
    resolves_to,
)

TITLES = ("alpha", "beta", "gamma")


@dataclass
class ModelPane:
    incarnation: Incarnation
    title: str
    session: str | None = None  # the one session the model says this incarnation holds


class DirectoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Directory()
        self.panes: dict[str, ModelPane] = {}
        self.next_pane = 0
        self.next_pid = 100
        self.issued: list[tuple[str, str]] = []  # every (pane id, token) the directory ever listed
        self.server = (1, 1000)

    def _poll(self) -> None:
        self.directory = observe(
            self.directory,
            [PaneObservation(p.incarnation, harness="claude", title=p.title) for p in self.panes.values()],
        )
        self.issued.extend((r.pane_id, r.token) for r in self.directory.records())

    def _new_incarnation(self, pane_id: str) -> Incarnation:
        self.next_pid += 1
        return Incarnation(self.server[0], self.server[1], pane_id, self.next_pid, self.next_pid * 7)

    @initialize()
    def start(self) -> None:
        self._poll()

    @rule(title=st.sampled_from(TITLES))
    def spawn(self, title: str) -> None:
        pane_id = f"%{self.next_pane}"
        self.next_pane += 1
        self.panes[pane_id] = ModelPane(self._new_incarnation(pane_id), title)
        self._poll()

    @precondition(lambda self: bool(self.panes))
    @rule(data=st.data())
    def respawn(self, data: st.DataObject) -> None:
        pane_id = data.draw(st.sampled_from(sorted(self.panes)))
        self.panes[pane_id] = ModelPane(self._new_incarnation(pane_id), self.panes[pane_id].title)
        self._poll()

    @precondition(lambda self: bool(self.panes))
    @rule(data=st.data(), title=st.sampled_from(TITLES))
    def retitle(self, data: st.DataObject, title: str) -> None:
        self.panes[data.draw(st.sampled_from(sorted(self.panes)))].title = title
        self._poll()

    @precondition(lambda self: bool(self.panes))
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        del self.panes[data.draw(st.sampled_from(sorted(self.panes)))]
        self._poll()

    @rule()
    def restart_server(self) -> None:
        """kill-server and a fresh server: pane ids restart at %0, every incarnation is new."""
        self.server = (self.server[0] + 1, self.server[1] + 1)
        self.panes = {}
        self.next_pane = 0
        self._poll()

    @precondition(lambda self: bool(self.panes))
    @rule(data=st.data(), session=st.sampled_from(("s1", "s2")))
    def registry_says(self, data: st.DataObject, session: str) -> None:
        pane_id = data.draw(st.sampled_from(sorted(self.panes)))
        token = self.panes[pane_id].incarnation.token
        self.directory = note_evidence(
            self.directory, Evidence(pane_id, token, EvidenceSource.REGISTRY, "claude", session)
        )
        self.panes[pane_id].session = session

    @invariant()
    def live_panes_and_tokens_match_the_model(self) -> None:
        """The directory lists exactly the live panes, each under its current incarnation's token."""
        assert {p: r.token for p, r in self.directory.panes.items()} == {
            p: m.incarnation.token for p, m in self.panes.items()
        }

    @invariant()
    def an_issued_address_never_reaches_another_process(self) -> None:
        """An address resolves only to the incarnation it was issued for; otherwise it is refused as
        stale (pane id live, other process) or unknown (pane gone)."""
        for pane_id, token in self.issued[-30:]:
            live = self.panes.get(pane_id)
            try:
                record = resolve(self.directory, f"{pane_id}@{token}")
            except TargetError as err:
                expected = TargetRefusal.UNKNOWN_TARGET if live is None else TargetRefusal.STALE_INCARNATION
                assert err.reason is expected
                assert live is None or live.incarnation.token != token
            else:
                assert live is not None and record.incarnation == live.incarnation

    @invariant()
    def a_title_handle_names_one_pane_or_is_refused_with_the_count(self) -> None:
        """A handle resolves to the one pane with that title, or is refused: none, or ambiguous with the count."""
        for title in TITLES:
            holders = sorted(p for p, m in self.panes.items() if m.title == title)
            try:
                record = resolve(self.directory, f"title:{title}")
            except TargetError as err:
                if holders:
                    assert err.reason is TargetRefusal.AMBIGUOUS and err.candidates == len(holders) > 1
                else:
                    assert err.reason is TargetRefusal.NO_PANE
                assert resolves_to(self.directory, f"title:{title}") is None
            else:
                assert holders == [record.pane_id]
                assert resolves_to(self.directory, f"title:{title}") == record.pane_id

    @invariant()
    def binding_follows_the_evidence_of_this_incarnation_only(self) -> None:
        """A pane is bound only to a session claimed for its current incarnation, never guessed: two
        panes claiming one session are both unknown, and a new incarnation starts unbound."""
        claimed: dict[str, list[str]] = {}
        for pane_id, model in self.panes.items():
            if model.session is not None:
                claimed.setdefault(model.session, []).append(pane_id)
        for pane_id, model in self.panes.items():
            got = binding(self.directory, pane_id)
            if model.session is None:
                assert got == Unknown(Unbound.NO_EVIDENCE, f"nothing says which session {pane_id} holds")
            elif len(claimed[model.session]) > 1:
                assert isinstance(got, Unknown) and got.reason is Unbound.SHARED_SESSION
            else:
                assert got == SessionBinding("claude", model.session, (EvidenceSource.REGISTRY,))


TestDirectoryMachine = DirectoryMachine.TestCase
TestDirectoryMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
