"""The shape every connectcore machine shares, after h11's ``_state.py``.

Rules first, then the transition table as plain data, then a loud error for an event the table
does not allow. A :class:`Table` is readable data; :meth:`Table.as_transitions_machine` builds the
equivalent ``transitions`` machine from it (the library chosen for this project), which is what the
docs/ diagrams are drawn from by ``scripts/gen_diagrams.py``. The pure ``step`` functions of the
machines consult :meth:`Table.next` and never mutate anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

S = TypeVar("S", bound=StrEnum)


class ConnectError(Exception):
    """Base of every error connectcore raises."""


class TransitionNotAllowed(ConnectError):
    """An event arrived that the machine's table does not allow in the current state.

    This is a bug in the caller (the daemon fed an event out of order), never a user error, so it is
    loud and typed instead of a silent no-op.
    """

    def __init__(self, machine: str, state: str, event: str) -> None:
        super().__init__(f"{machine}: event {event!r} is not allowed in state {state!r}")
        self.machine = machine
        self.state = state
        self.event = event


@dataclass(frozen=True)
class Table(Generic[S]):
    """A finite machine as data: ``(source, event) -> destination``."""

    name: str
    initial: S
    finals: frozenset[S]
    edges: tuple[tuple[S, str, S], ...]

    def __post_init__(self) -> None:
        seen: set[tuple[S, str]] = set()
        for src, event, _dst in self.edges:
            if (src, event) in seen:
                raise ValueError(f"{self.name}: duplicate edge {src}/{event}")
            if src in self.finals:
                raise ValueError(f"{self.name}: final state {src} has an outgoing edge {event}")
            seen.add((src, event))

    @property
    def states(self) -> tuple[S, ...]:
        return tuple(type(self.initial))

    def events(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(event for _s, event, _d in self.edges))

    def allows(self, state: S, event: str) -> bool:
        return any(src == state and ev == event for src, ev, _dst in self.edges)

    def next(self, state: S, event: str) -> S:
        """The destination of ``event`` from ``state``, or :class:`TransitionNotAllowed`."""
        for src, ev, dst in self.edges:
            if src == state and ev == event:
                return dst
        raise TransitionNotAllowed(self.name, str(state), event)

    def as_transitions_machine(self, model: Any = None, *, graph: bool = False) -> Any:
        """The same table as a ``transitions`` machine (no callbacks, so it stays side-effect free)."""
        from transitions import Machine
        from transitions.extensions import GraphMachine

        machine_class: type[Machine] = GraphMachine if graph else Machine
        kwargs: dict[str, Any] = {}
        if graph:
            kwargs["graph_engine"] = "mermaid"
            kwargs["title"] = self.name
        return machine_class(
            model=model if model is not None else "self",
            states=[str(s) for s in self.states],
            transitions=[[ev, str(src), str(dst)] for src, ev, dst in self.edges],
            initial=str(self.initial),
            auto_transitions=False,
            send_event=False,
            **kwargs,
        )


def mermaid(table: Table[Any]) -> str:
    """A Mermaid state diagram of ``table``, drawn by ``transitions`` from the table itself."""

    class _Model:
        pass

    model = _Model()
    table.as_transitions_machine(model, graph=True)
    text: str = model.get_graph().draw(None)  # type: ignore[attr-defined]
    text = text.replace(f"---\n{table.name}\n---", f"---\ntitle: {table.name}\n---", 1)
    finals = "\n".join(f"  {s} --> [*]" for s in sorted(str(f) for f in table.finals))
    return text.rstrip() + ("\n" + finals if finals else "") + "\n"


def freeze(items: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
    """A fresh dict from pairs; the machines treat every dict in a frozen state as read-only."""
    return dict(items)
