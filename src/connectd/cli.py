"""The ``connectd`` command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="connectd", description="connect: the daemon and its CLI")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="start the daemon (the demo fleet when no tmux server runs)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        print("connectd: the daemon is not built yet (issue: connectd, the daemon end to end)")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
