"""docs/history.md and the skill file name the allowlist and the weights the code uses."""

from __future__ import annotations

import re
from pathlib import Path

from connectcore.history import ALLOWED_FIELDS, FIELD_WEIGHTS, RECENCY_FLOOR, Field, Liveness

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "history.md").read_text()
SKILL = (ROOT / "skills" / "connect-history" / "SKILL.md").read_text()


def test_doc_allowlist_table_is_the_code_allowlist():
    section = DOC.split("## What the tools return: the allowlist", 1)[1].split("\n## ", 1)[0]
    fields = re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M)
    assert tuple(fields) == ALLOWED_FIELDS


def test_skill_names_the_allowlist_and_every_liveness():
    for name in ALLOWED_FIELDS:
        assert f"`{name}`" in SKILL
    for state in Liveness:
        assert f"`{state.value}`" in SKILL
    assert SKILL.startswith("---\nname: connect-history\ndescription: ")


def test_doc_states_the_ranking_weights():
    weights = {
        Field.TITLE: "title",
        Field.BRANCHES: "branches",
        Field.PRS: "PR links",
        Field.PATH: "path",
        Field.PROMPTS: "prompts",
    }
    for field, word in weights.items():
        value = FIELD_WEIGHTS[field]
        assert f"{word} {value:g}" in DOC, word
    assert f"towards {RECENCY_FLOOR:g}" in DOC
