"""The captured screen corpus (tests/fixtures/screens/) as test cases, shared by
tests/unit/test_screen.py and scripts/eval_screens.py (kept under tests/ so mutation runs, which copy
tests/ but not scripts/, can load it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectcore.screen import Reading, read_screen

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "screens"
AGENTS = {"claude", "codex", "opencode"}


@dataclass(frozen=True)
class Case:
    name: str  # <program>/<version>/<stem>
    text: str
    meta: dict[str, Any]

    @property
    def expected(self) -> dict[str, Any]:
        return dict(self.meta["expected"])

    @property
    def expected_ready(self) -> bool:
        e = self.expected
        return e["harness"] in AGENTS and e["activity"] == "idle" and e["composer"] == "empty"

    def read(self, *, with_cursor: bool = True) -> Reading:
        cursor = tuple(self.meta["cursor"]) if with_cursor else None
        return read_screen(self.text, self.meta["foreground_command"], cursor,  # type: ignore[arg-type]
                           height=self.meta["height"])


def load_corpus(root: Path = CORPUS) -> list[Case]:
    """Every NN_<state>_<width>.json (with its .txt) under root/<program>/<version>/."""
    return [load_case(str(path.relative_to(root).with_suffix("")), root) for path in sorted(root.glob("*/*/*.json"))]


def load_case(name: str, root: Path = CORPUS) -> Case:
    """One screen of the corpus by its name, ``<program>/<version>/<stem>``."""
    meta_path = root / f"{name}.json"
    return Case(name, meta_path.with_suffix(".txt").read_text(), json.loads(meta_path.read_text()))


def misses(case: Case, reading: Reading) -> list[str]:
    """What the reading got wrong, as readable lines (empty: all right)."""
    e = case.expected
    out = []
    for field in ("harness", "activity", "composer"):
        got = str(getattr(reading, field))
        if got != e[field]:
            out.append(f"{field}: expected {e[field]}, read {got}")
    question = e.get("question")
    if question is not None:
        got_q = None if reading.question is None else {"prompt": reading.question.prompt,
                                                        "options": list(reading.question.options)}
        if got_q != question:
            out.append(f"question: expected {question}, read {got_q}")
    if reading.ready_for_message and not case.expected_ready:
        out.append("FALSE READY: read as idle with an empty composer")
    return out
