"""The soak section of docs/benchmarks.md survives ``make bench`` regenerating the file."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from benchlib.soak import BEGIN, END, kept, splice  # noqa: E402


def test_bench_keeps_the_soak_block() -> None:
    """A regenerated report carries the old file's soak block unchanged, once."""
    block = f"{BEGIN}\n## Soak: 200 panes, 50 agents, 10 minutes\n\nnumbers\n{END}\n"
    old = "# Benchmarks\n\nold numbers\n\n" + block + "\ntrailer\n"
    new = splice("# Benchmarks\n\nnew numbers\n", kept(old))
    assert new.count(BEGIN) == 1 and new.count(END) == 1
    assert "new numbers" in new and "old numbers" not in new and kept(new) == block


def test_soak_replaces_only_its_block() -> None:
    """Writing a new soak block replaces the old one and leaves the rest of the file as it was."""
    doc = f"head\n{BEGIN}\nold soak\n{END}\ntail\n"
    out = splice(doc, f"{BEGIN}\nnew soak\n{END}\n")
    assert out == f"head\n{BEGIN}\nnew soak\n{END}\ntail\n"
    assert kept("no block here") == ""
