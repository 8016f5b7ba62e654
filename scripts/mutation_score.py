"""Run mutmut and print the score, overall and per module.

Score = (killed + timeout) / (total - skipped).

- ``make mutation`` mutates the whole core (``src/connectcore``) against tests/unit and tests/model;
  pass module names to limit the run (``python scripts/mutation_score.py hub grants consent delivery``).
  The model tests run with fewer examples per mutant (CONNECT_MODEL_EXAMPLES, default 25 here).
- ``--save FILE`` writes each selected mutant's result (``name: status``, one a line) to FILE, and
  ``--resume FILE`` runs only the mutants FILE lists as ``not checked`` (a run stopped by a session's
  end goes on in a fresh copy of the same product code: docs/survivors/shell-results.txt).
- ``make mutation-shell`` (``--shell``) mutates the daemon's decision-bearing modules (SHELL_MODULES:
  the runner, the interpreter, the delivery guard, the supervisor, startup reconciliation in the
  watcher) against SHELL_TESTS: the shell's unit tests and a bounded simulation of the whole daemon.
  It runs in a copy of the tree (``mutmut`` takes one ``[tool.mutmut]`` section, the core's), with the
  copy's section rewritten to mutate ``src/connectd``.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SHELL_MODULES = [
    "daemon.runner", "daemon.interpreter", "delivery.guard", "daemon.supervisor",
    "tmux.watcher", "tmux.pane_poll", "tmux.captures",
]
# Of the watcher, the methods that decide what the core hears at startup and after (which incarnations
# live, startup reconciliation, what a pane shows); its session-binding and routing-fact code is tested
# by the integration tests, which a mutation run does not include.
SHELL_METHODS = {
    "tmux.watcher": (
        "Watcher",
        ["observe_pane", "mark_output", "look_again", "remember_reading", "fresh_incarnation"],
    ),
    "tmux.pane_poll": ("PanePoll", ["poll", "_poll", "reconcile", "_step_gone"]),
    "tmux.captures": ("CaptureSchedule", ["capture_dirty", "mark_output", "drawn", "sweep"]),
}
SHELL_TESTS = [
    "tests/unit/test_runner.py",
    "tests/unit/test_interpreter.py",
    "tests/unit/test_interpreter_mutants.py",
    "tests/unit/test_supervisor.py",
    "tests/unit/test_delivery_io.py",
    "tests/unit/test_guard_mutants.py",
    "tests/unit/test_watcher.py",
    "tests/unit/test_watcher_release.py",
    "tests/unit/test_watcher_retell.py",
    "tests/simulation",
]
SIMULATION_SEEDS_PER_MUTANT = "8"  # the bounded run per mutant (make test runs 20)


def shell_copy(modules: list[str]) -> Path:
    """A copy of the tree whose mutmut section mutates these modules of src/connectd (only their files:
    mutmut 3 generates mutants for everything in ``source_paths``) against SHELL_TESTS."""
    copy = Path(tempfile.mkdtemp(prefix="connect-mutation-shell-"))
    ignore = shutil.ignore_patterns(".venv", "mutants", ".cache", ".git", "__pycache__", "*.pyc")
    shutil.copytree(ROOT, copy, dirs_exist_ok=True, ignore=ignore)
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    files = ", ".join(f'"src/connectd/{m.replace(".", "/")}.py"' for m in modules)
    text = text.replace('source_paths = ["src/connectcore/"]', f"source_paths = [{files}]")
    text = text.replace('also_copy = ["src/connectd/",', 'also_copy = ["src/connectcore/", "src/connectd/",')
    text = re.sub(r"do_not_mutate = \[[^\]]*\]", "do_not_mutate = []", text)
    present = [t for t in SHELL_TESTS if (ROOT / t).exists()]
    for missing in sorted(set(SHELL_TESTS) - set(present)):
        print(f"note: {missing} is not in this tree; the shell's mutants run without it", file=sys.stderr)
    tests = ", ".join(f'"{t}"' for t in present)
    text = re.sub(r"pytest_add_cli_args_test_selection = \[[^\]]*\]", f"pytest_add_cli_args_test_selection = [{tests}]", text)
    if "source_paths = [\"src/connectd/" not in text:
        raise SystemExit("pyproject.toml's [tool.mutmut] section changed shape: update scripts/mutation_score.py")
    pyproject.write_text(text)
    return copy


def _option(argv: list[str], flag: str) -> str | None:
    """The value after ``flag`` (removed from argv with it), or None."""
    if flag not in argv:
        return None
    i = argv.index(flag)
    value = argv[i + 1]
    del argv[i : i + 2]
    return value


def _results(text: str) -> list[tuple[str, str]]:
    """(name, result) of each line ``name: result`` (mutmut's ``results --all true``, or a saved file)."""
    found = (re.match(r"^\s*(\S+):\s*(\w[\w ]*)$", line) for line in text.splitlines())
    return [(m.group(1), m.group(2).strip()) for m in found if m]


def unchecked(saved: str) -> list[str]:
    """The names a saved result file (``--save``) lists as not checked."""
    return [name for name, result in _results(saved) if result == "not checked"]


def main(argv: list[str]) -> int:
    shell = "--shell" in argv
    save = _option(argv, "--save")
    resume = _option(argv, "--resume")
    modules = [a for a in argv if not a.startswith("-")] or (SHELL_MODULES if shell else [])
    extra = [a for a in argv if a.startswith("-") and a != "--shell"]
    package = "connectd" if shell else "connectcore"
    env = {
        **os.environ,
        "CONNECT_MODEL_EXAMPLES": os.environ.get("CONNECT_MODEL_EXAMPLES", "25"),
        "SIM_SEEDS": os.environ.get("SIM_SEEDS", SIMULATION_SEEDS_PER_MUTANT),
    }
    where = shell_copy(modules) if shell else ROOT
    shutil.rmtree(where / "mutants", ignore_errors=True)
    names = [
        name
        for m in modules
        for name in (
            [f"{package}.{m}.x\u01c1{SHELL_METHODS[m][0]}\u01c1{f}__mutmut_*" for f in SHELL_METHODS[m][1]]
            if shell and m in SHELL_METHODS
            else [f"{package}.{m}.*"]
        )
    ]
    chosen = names
    if resume is not None:
        chosen = unchecked(Path(resume).read_text())
        print(f"resuming: {len(chosen)} mutants of {resume} not checked", file=sys.stderr)
    if chosen:
        subprocess.run([str(BIN / "mutmut"), "run", *extra, *chosen], cwd=where, env=env, check=False)
    out = subprocess.run([str(BIN / "mutmut"), "results", "--all", "true"], cwd=where, env=env, capture_output=True, text=True)
    status: dict[str, str] = {}  # each selected mutant's result: the saved file's, then this run's
    fresh = {name: result for name, result in _results(out.stdout) if any(fnmatch.fnmatchcase(name, n) for n in names)}
    if resume is not None:
        status.update(_results(Path(resume).read_text()))
        status.update((name, result) for name, result in fresh.items() if result != "not checked" or name not in status)
    else:
        status = fresh
    if save is not None:
        Path(save).write_text("".join(f"{name}: {result}\n" for name, result in sorted(status.items())))
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for name, result in status.items():
        match = re.match(rf"^({package}\.[A-Za-z_]+)\.", name)
        if match:
            # a module in a folder (the shell's daemon.runner) is named whole, not by its folder
            module = next((f"{package}.{m}" for m in modules if name.startswith(f"{package}.{m}.")), match.group(1))
            per[module][result] += 1
    if modules:
        per = {k: v for k, v in per.items() if k.removeprefix(f"{package}.") in modules}
    rows = []
    total = Counter[str]()
    for module in sorted(per):
        counts = per[module]
        total.update(counts)
        rows.append((module, counts))
    print("| module | mutants | killed | timeout | survived | no tests | not checked | score of checked |")
    print("|---|---|---|---|---|---|---|---|")
    for module, counts in [*rows, ("all", total)]:
        considered = sum(counts.values()) - counts["skipped"] - counts["not checked"]
        killed = counts["killed"] + counts["timeout"]
        score = 100.0 * killed / considered if considered else 0.0
        print(
            f"| {module} | {sum(counts.values())} | {counts['killed']} | {counts['timeout']} | {counts['survived']} "
            f"| {counts['no tests']} | {counts['not checked']} | {score:.1f}% |"
        )
    if shell:
        print(f"(mutants and survivors are in {where}/mutants; `mutmut show NAME` there shows one)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
