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


def test_architecture_lists_every_effect_type_and_no_other() -> None:
    """Claim: docs/architecture.md's effect list names exactly the effect types connectcore defines."""
    import re

    from tests.unit.test_interpreter import _effect_types

    text = (ROOT / "docs" / "architecture.md").read_text()
    para = text.split("Effects are plain data", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([A-Z][A-Za-z]+)`", para))
    defined = {t.__name__ for t in _effect_types()}
    assert listed == defined, f"missing: {sorted(defined - listed)}; never defined: {sorted(listed - defined)}"


def test_the_module_table_is_generated_from_every_module_s_docstring() -> None:
    """Claim: docs/modules.md names every module of both packages with its current docstring."""
    result = subprocess.run([sys.executable, "scripts/gen_modules.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
