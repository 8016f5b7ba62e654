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
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from connectcore.screen import Activity, Composer, Reading  # noqa: E402
from tests.support.screen_corpus import CORPUS, Case, load_corpus, misses  # noqa: E402


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
