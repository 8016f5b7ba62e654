"""The stand-in agent reads a bracketed paste as one, however the terminal splits it into reads."""

from __future__ import annotations

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
