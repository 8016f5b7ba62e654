"""``make soak``: P panes, A stand-in agents exchanging messages for M minutes; the section goes into
docs/benchmarks.md between ``<!-- soak:begin -->`` and ``<!-- soak:end -->`` (see benchlib/soak.py)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "scripts"), str(REPO)]

from benchlib import soak  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--panes", type=int, default=200)
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--period", type=float, default=10.0, help="seconds between one agent's messages")
    ap.add_argument("--sample", type=float, default=30.0, help="seconds between RSS/CPU samples")
    ap.add_argument("--id-ttl", type=float, default=None, help="seconds an id is held (default the policy's 3600)")
    ap.add_argument("--label", default="", help="a note printed under the title (e.g. 'short validation run')")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = ap.parse_args(argv)
    if not 2 <= args.agents <= args.panes:
        ap.error(f"--agents must be at least 2 and at most --panes: {args.agents} agents, {args.panes} panes")
    with tempfile.TemporaryDirectory(prefix="connect-soak-") as tmp:
        result = soak.run(Path(tmp), minutes=args.minutes, panes=args.panes, agents=args.agents,
                          period=args.period, sample=args.sample, id_ttl=args.id_ttl)
    block = soak.report(result, label=args.label)
    print(block)
    old = args.out.read_text() if args.out.exists() else ""
    args.out.write_text(soak.splice(old, block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
