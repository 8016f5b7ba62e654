"""Run mutmut on src/connectcore and print the score: (killed + timeout) / (total - skipped)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def main() -> int:
    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    subprocess.run([str(BIN / "mutmut"), "run", *sys.argv[1:]], cwd=ROOT, check=False)
    subprocess.run([str(BIN / "mutmut"), "export-cicd-stats"], cwd=ROOT, check=True)
    stats = json.loads((ROOT / "mutants" / "mutmut-cicd-stats.json").read_text())
    total = stats["total"] - stats.get("skipped", 0)
    killed = stats["killed"] + stats.get("timeout", 0)
    score = 100.0 * killed / total if total else 0.0
    print(json.dumps(stats, indent=2))
    print(f"mutation score: {score:.1f}% ({killed} of {total} mutants killed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
