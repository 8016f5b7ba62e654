"""Run mutmut on src/connectcore and print the score, overall and per module.

Score = (killed + timeout) / (total - skipped). ``make mutation`` mutates the whole core; pass module
names to limit the run (``python scripts/mutation_score.py hub grants consent delivery``). The model
tests run with fewer examples per mutant (CONNECT_MODEL_EXAMPLES, default 25 here).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LINE = re.compile(r"^\s*(connectcore\.[\w.]+?)\.(x_|x[ǁ]|\w+__mutmut_)\S*:\s*(\w+)")


def main(argv: list[str]) -> int:
    modules = [a for a in argv if not a.startswith("-")]
    extra = [a for a in argv if a.startswith("-")]
    env = {**os.environ, "CONNECT_MODEL_EXAMPLES": os.environ.get("CONNECT_MODEL_EXAMPLES", "25")}
    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    names = [f"connectcore.{m}.*" for m in modules]
    subprocess.run([str(BIN / "mutmut"), "run", *extra, *names], cwd=ROOT, env=env, check=False)
    out = subprocess.run([str(BIN / "mutmut"), "results", "--all", "true"], cwd=ROOT, env=env, capture_output=True, text=True)
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for line in out.stdout.splitlines():
        match = re.match(r"^\s*(connectcore\.[A-Za-z_]+)\.\S+:\s*(\w[\w ]*)$", line)
        if match:
            per[match.group(1)][match.group(2).strip()] += 1
    if modules:
        per = {k: v for k, v in per.items() if k.split(".")[1] in modules}
    rows = []
    total = Counter[str]()
    for module in sorted(per):
        counts = per[module]
        total.update(counts)
        rows.append((module, counts))
    print("| module | mutants | killed | timeout | survived | no tests | score |")
    print("|---|---|---|---|---|---|---|")
    for module, counts in [*rows, ("all", total)]:
        considered = sum(counts.values()) - counts["skipped"]
        killed = counts["killed"] + counts["timeout"]
        score = 100.0 * killed / considered if considered else 0.0
        print(
            f"| {module} | {sum(counts.values())} | {counts['killed']} | {counts['timeout']} | {counts['survived']} "
            f"| {counts['no tests']} | {score:.1f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
