#!/usr/bin/env python3
"""Score the screen reader on the captured corpus (tests/fixtures/screens/).

    python scripts/eval_screens.py          # make eval-screens

For every fixture (NN_<state>_<width>.txt + .json, captured by scripts/capture_screens.py) it runs
``read_screen(text, foreground_command, cursor, height=height)`` and compares harness, activity,
composer and, where the fixture names one, the dialog question with the expected reading written at
capture time. It prints a confusion table per harness (expected rows, read columns) for activity and
for composer, lists every miss, and exits non-zero on any miss or any false ready_for_message (a
screen read as idle-and-empty that is not).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from connectcore.screen import Activity, Composer, Reading, read_screen  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "screens"
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
    cases = []
    for meta_path in sorted(root.glob("*/*/*.json")):
        text_path = meta_path.with_suffix(".txt")
        meta = json.loads(meta_path.read_text())
        cases.append(Case(str(meta_path.relative_to(root).with_suffix("")), text_path.read_text(), meta))
    return cases


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


def table(title: str, rows: list[str], cols: list[str], counts: Counter[tuple[str, str]]) -> str:
    width = max(len(title), *(len(r) for r in rows)) + 2
    head = f"{title:<{width}}" + "".join(f"{c:>9}" for c in cols)
    lines = [head]
    for r in rows:
        lines.append(f"{r:<{width}}" + "".join(f"{counts[(r, c)] or '.':>9}" for c in cols))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="screens folder (default: the fixtures)")
    args = parser.parse_args(argv)
    cases = load_corpus(args.corpus)
    if not cases:
        print(f"no fixtures under {args.corpus}")
        return 1
    by_group: dict[str, list[tuple[Case, Reading]]] = defaultdict(list)
    failures: list[tuple[Case, list[str]]] = []
    false_ready = 0
    for case in cases:
        reading = case.read()
        by_group[case.expected["harness"]].append((case, reading))
        wrong = misses(case, reading)
        if wrong:
            failures.append((case, wrong))
        false_ready += reading.ready_for_message and not case.expected_ready
        # the reader must stay safe without the cursor too (the daemon may not always have it)
        blind = case.read(with_cursor=False)
        if blind.ready_for_message and not case.expected_ready:
            failures.append((case, ["FALSE READY without the cursor"]))
            false_ready += 1
    activities = [str(a) for a in Activity]
    composers = [str(c) for c in Composer]
    for group, items in sorted(by_group.items()):
        versions = sorted({c.meta["version"] for c, _ in items})
        right = sum(not misses(c, r) for c, r in items)
        print(f"\n== {group} ({', '.join(versions)}): {right}/{len(items)} right")
        act = Counter((c.expected["activity"], str(r.activity)) for c, r in items)
        comp = Counter((c.expected["composer"], str(r.composer)) for c, r in items)
        print(table("activity  exp\\read", activities, activities, act))
        print(table("composer  exp\\read", composers, composers, comp))
    total = len(cases)
    print(f"\n{total - len({c.name for c, _ in failures})}/{total} screens read right; "
          f"false ready_for_message: {false_ready}")
    for case, wrong in failures:
        print(f"  MISS {case.name}: " + "; ".join(wrong))
    return 1 if failures or false_ready else 0


if __name__ == "__main__":
    raise SystemExit(main())
