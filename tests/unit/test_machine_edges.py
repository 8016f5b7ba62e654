"""The shared machine base: the Table's queries, its transitions machine and the generated diagram."""

from __future__ import annotations

from enum import StrEnum

import pytest
from transitions import Machine
from transitions.extensions import GraphMachine

from connectcore._machine import ConnectError, Table, TransitionNotAllowed, freeze, mermaid
from connectcore.grants import TOKEN_TABLE, TokenState


class Light(StrEnum):
    OFF = "off"
    ON = "on"


LOOP: Table[Light] = Table(
    name="light",
    initial=Light.OFF,
    finals=frozenset(),
    edges=((Light.OFF, "flip", Light.ON), (Light.ON, "flip", Light.OFF), (Light.ON, "dim", Light.ON)),
)


def test_transition_not_allowed_names_machine_state_and_event() -> None:
    with pytest.raises(TransitionNotAllowed) as err:
        TOKEN_TABLE.next(TokenState.REVOKED, "revoke")
    assert isinstance(err.value, ConnectError)
    assert str(err.value) == "token: event 'revoke' is not allowed in state 'revoked'"
    assert (err.value.machine, err.value.state, err.value.event) == ("token", "revoked", "revoke")


def test_table_queries() -> None:
    assert LOOP.states == (Light.OFF, Light.ON)
    assert LOOP.events() == ("flip", "dim")
    assert LOOP.allows(Light.ON, "dim") and not LOOP.allows(Light.OFF, "dim")
    assert LOOP.next(Light.OFF, "flip") is Light.ON and LOOP.next(Light.ON, "flip") is Light.OFF


def test_table_shape_errors_name_the_edge() -> None:
    with pytest.raises(ValueError) as err:
        Table(name="t", initial=Light.OFF, finals=frozenset(), edges=((Light.OFF, "x", Light.ON), (Light.OFF, "x", Light.OFF)))
    assert str(err.value) == "t: duplicate edge off/x"
    with pytest.raises(ValueError) as err:
        Table(name="t", initial=Light.OFF, finals=frozenset({Light.ON}), edges=((Light.ON, "y", Light.OFF),))
    assert str(err.value) == "t: final state on has an outgoing edge y"
    Table(name="t", initial=Light.OFF, finals=frozenset({Light.ON}), edges=((Light.OFF, "x", Light.ON),))


def test_the_transitions_machine_is_plain_and_has_no_implicit_transitions() -> None:
    machine = LOOP.as_transitions_machine()
    assert type(machine) is Machine and not isinstance(machine, GraphMachine)
    assert machine.state == "off"
    assert machine.auto_transitions is False and machine.send_event is False
    assert not hasattr(machine, "to_on")
    machine.flip()
    assert machine.state == "on"

    class Model:
        pass

    model = Model()
    LOOP.as_transitions_machine(model)
    assert model.state == "off"  # type: ignore[attr-defined]
    model.flip()  # type: ignore[attr-defined]
    assert model.state == "on" and not hasattr(model, "to_off")  # type: ignore[attr-defined]


def test_the_graph_machine_draws_mermaid() -> None:
    class Model:
        pass

    model = Model()
    machine = LOOP.as_transitions_machine(model, graph=True)
    assert isinstance(machine, GraphMachine)
    assert machine.auto_transitions is False and machine.send_event is False
    assert machine.title == "light"
    assert model.get_graph().draw(None).startswith("---\nlight\n---\nstateDiagram-v2\n")  # type: ignore[attr-defined]


def test_mermaid_of_a_table_with_finals() -> None:
    assert mermaid(TOKEN_TABLE) == (
        "---\ntitle: token\n---\nstateDiagram-v2\n  direction LR\n"
        "  classDef s_default fill:white,color:black\n  classDef s_inactive fill:white,color:black\n"
        "  classDef s_parallel color:black,fill:white\n  classDef s_active color:red,fill:darksalmon\n"
        "  classDef s_previous color:blue,fill:azure\n  \n"
        '  state "live" as live\n  Class live s_active\n  state "revoked" as revoked\n  Class revoked s_default\n'
        '  state "ended" as ended\n  Class ended s_default\n  \n'
        "  live --> revoked: revoke\n  live --> ended: incarnation_ended\n  [*] --> live\n"
        "  ended --> [*]\n  revoked --> [*]\n"
    )


def test_mermaid_of_a_table_without_finals_ends_after_its_edges() -> None:
    text = mermaid(LOOP)
    assert text.startswith("---\ntitle: light\n---\nstateDiagram-v2\n")
    assert text.endswith("  on --> on: dim\n  [*] --> off\n")
    assert "--> [*]" not in text


def test_freeze_builds_a_fresh_dict() -> None:
    pairs = [("a", 1), ("b", 2)]
    assert freeze(pairs) == {"a": 1, "b": 2}
    assert freeze(iter(())) == {}
