"""The stand-in agent reads a bracketed paste as one, however the terminal splits it into reads; a
``/busy-while`` turn lasts exactly as long as its file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from connectd.cli.demo_agent import PASTE_END, PASTE_START, Agent


@pytest.mark.parametrize("cuts", [(), (4090,), (4090, 6212), (3,), (-3,), (-5,), (-1,)])
def test_a_paste_split_across_reads_is_one_prompt(cuts: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """Claim: a paste of 8 KiB with newlines, cut anywhere (inside its end marker too), is one prompt."""
    monkeypatch.delenv("DEMO_AGENT_LOG", raising=False)
    agent = Agent([])
    text = "\n".join(f"line {n} " + "x" * 90 for n in range(80))[: 8 * 1024]
    stream = PASTE_START + text + PASTE_END + "\r"
    points = sorted({c if c >= 0 else len(stream) - len(PASTE_END) - 1 - c - 1 for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    prompts: list[str] = []
    agent.submit = lambda: prompts.append(agent.composer) or setattr(agent, "composer", "") or True  # type: ignore[method-assign]
    for piece in pieces:
        assert agent.feed(piece)
    assert prompts == [text] and agent.composer == "" and not agent.pasting


def test_a_busy_while_turn_lasts_until_its_file_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Claim: the turn is busy (typing ignored) while the file exists, however long, and ends at once
    when the test removes it, with its reply."""
    monkeypatch.delenv("DEMO_AGENT_LOG", raising=False)
    flag = tmp_path / "busy"
    flag.touch()
    agent = Agent([])
    assert agent.feed(f"/busy-while {flag}\r")
    agent.release_held_turn()
    assert time.monotonic() < agent.busy_until and agent.feed("typed") and agent.composer == ""
    flag.unlink()
    agent.release_held_turn()
    assert time.monotonic() >= agent.busy_until and agent.busy_while is None
    assert agent.feed("typed") and agent.composer == "typed"
