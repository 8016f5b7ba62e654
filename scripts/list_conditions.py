"""List every condition in a source tree (each if/while test, ternary test and comprehension filter)
as ``file:line: condition``: the starting point of the review of connectd for rules (docs/architecture.md,
"How the shell was checked for rules"). Usage: python scripts/list_conditions.py src/connectd"""

from __future__ import annotations

import ast
import pathlib
import sys


def conditions(root: pathlib.Path) -> list[tuple[str, int, str]]:
    rows: list[tuple[str, int, str]] = []
    for path in sorted(root.rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(src)):
            tests: list[ast.expr] = []
            if isinstance(node, ast.If | ast.While | ast.IfExp):
                tests.append(node.test)
            elif isinstance(node, ast.comprehension):
                tests.extend(node.ifs)
            rows += [(str(path.relative_to(root)), t.lineno, ast.get_source_segment(src, t) or "") for t in tests]
    return rows


def main() -> int:
    rows = conditions(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src/connectd"))
    for file, line, text in rows:
        print(f"{file}:{line}: {text}")
    print(f"{len(rows)} conditions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
