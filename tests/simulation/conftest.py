"""The simulation's summary line: seeds run, steps simulated and steps per second."""

from __future__ import annotations

from typing import Any

from tests.simulation.driver import STATS
from tests.simulation.invariants import KNOWN_DEFECTS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if STATS["seeds"]:
        rate = STATS["steps"] / STATS["seconds"] if STATS["seconds"] else 0.0
        terminalreporter.write_line(
            f"simulation: {STATS['seeds']} runs, {STATS['steps']} steps, {STATS['io']} I/O calls, "
            f"{STATS['kills']} daemon kills, {rate:.0f} steps/s"
        )
    if waited := STATS.get("waited"):
        terminalreporter.write_line(
            f"federation: {len(waited)} seeds had a row wait for its deadline after quiescence "
            f"(as the outbox allows: docs/simulation.md \"Several boxes\"), e.g. {waited[:5]}"
        )
    for kind, seeds in sorted(STATS["known"].items()):
        terminalreporter.write_line(
            f"known defect {kind} ({KNOWN_DEFECTS[kind]}): {len(seeds)} seeds, e.g. {seeds[:5]}"
        )
