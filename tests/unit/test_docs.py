"""The generated docs stay in step with the code they are generated from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_state_diagrams_are_generated_from_the_current_tables() -> None:
    result = subprocess.run([sys.executable, "scripts/gen_diagrams.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_opens_with_the_two_commands() -> None:
    head = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    assert "make run" in head and "make test" in head
