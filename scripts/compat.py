#!/usr/bin/env python3
"""The compatibility matrix: the live acceptance and the screen capture + evaluation on each release.

    make compat CLAUDE=2.1.243,2.1.300 CODEX=0.149.0,0.160.0 OPENCODE=1.18.33
    python scripts/compat.py --claude 2.1.243,2.1.300 --codex 0.160.0 --opencode 1.18.33 [--width 80] [--no-pin]

For each release (and the pins in tests/support/harnesses.py, unless ``--no-pin``), one at a time:

1. install it from npm into ``.cache/harnesses/<name>-<version>/`` (skipped when present);
2. run the live acceptance with that release and the other harnesses at their pins
   (``CONNECT_<NAME>_VERSION`` selects the release): ``tests/integration/test_live.py`` for Claude
   Code and Codex, ``tests/integration/test_live_opencode.py`` for OpenCode (marker ``live``);
3. capture its screens with ``scripts/capture_screens.py`` into a temporary folder and read every
   one with the screen reader (as ``scripts/eval_screens.py`` does): screens read right, false
   ready-for-message (with and without the cursor), states the release does not draw;
4. with ``--corpus``, copy the captured screens into ``tests/fixtures/screens/<name>/<version>/``
   when the release draws differently from the pin (its normalized screens differ).

Each result is kept in ``docs/compatibility.json`` (one entry per release, replaced when run again)
and the matrix in ``docs/compatibility.md`` is rewritten from it between its markers. A release that
cannot pass says so with the reason (the failing step or the first line of the error); nothing is
counted as passed that did not run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.support import harnesses as H  # noqa: E402
from tests.support.screen_corpus import CORPUS, load_corpus, misses  # noqa: E402

RESULTS = REPO / "docs" / "compatibility.json"
MISREAD = REPO / "tests" / "fixtures" / "screens-misread"
DOC = REPO / "docs" / "compatibility.md"
START, END = "<!-- matrix:start (scripts/compat.py writes this table) -->", "<!-- matrix:end -->"
NAMES = {"claude": "Claude Code", "codex": "Codex", "opencode": "OpenCode"}
_BOTH = "tests/integration/test_live.py::test_real_claude_and_codex_agents_connect_and_talk_through_the_endpoint"
ACCEPTANCE = {"claude": _BOTH, "codex": _BOTH, "opencode": "tests/integration/test_live_opencode.py"}


def releases(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def release_dates(package: str) -> dict[str, str]:
    """Release -> its npm publication date (``npm view <package> time --json``); empty if npm fails."""
    try:
        out = subprocess.run(["npm", "view", package, "time", "--json"], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        return {k: v[:10] for k, v in json.loads(out).items() if k not in ("created", "modified")}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def env_for(name: str, release: str) -> dict[str, str]:
    env = dict(os.environ)
    for other in H.PACKAGES:
        env.pop(H.version_variable(other), None)
    env[H.version_variable(name)] = release
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    return env


def why(output: str) -> str:
    """The reason a run failed, in one line: the step that timed out (with how connectd read the
    agents that were not idle, when the run printed it) or the first assertion."""
    reason = _why(output)
    readings = re.findall(r"^E\s+(%\d+: harness=(?!shell)\w+ activity=(?!idle)\w+ composer=\w+)", output, re.M)
    if reason.startswith("step ") and readings:
        reason += "; connectd read " + ", ".join(readings)
    return reason


def _why(output: str) -> str:
    for pattern in (r"StepTimeout: (step '[^\n]*)", r"TimeoutError: (\[[^\n]*)", r"^E\s+(AssertionError: [^\n]*)",
                    r"^E\s+([A-Za-z]*Error: [^\n]*)", r"^(FAILED [^\n]*)", r"^(ERROR [^\n]*)"):
        found = re.search(pattern, output, re.M)
        if found:
            return found.group(1).strip().removesuffix("; last screen:")[:300]
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return tail[-1][:300] if tail else "no output"


def run_live(name: str, release: str, log: Path) -> dict[str, Any]:
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "live", "-s", "-p", "no:cacheprovider", ACCEPTANCE[name]]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env_for(name, release), capture_output=True, text=True,
                              timeout=900)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\nthe run took over 900 s", -1
    log.write_text(output)
    result: dict[str, Any] = {"passed": code == 0, "seconds": round(time.monotonic() - started)}
    mode = re.search(r"connect's tools from prompt \d+; ([a-z ]+ToolSearch|offered up front)", output)
    if mode and name == "claude":  # how this Claude Code release offers connect's tools
        result["mcp_tools"] = mode.group(1)
    if code != 0:
        result["reason"] = why(output)
    return result


def normalized(text: str) -> str:
    """A screen with what changes from run to run taken out: temporary paths, numbers, versions."""
    text = re.sub(r"/tmp/connect-capture-\w+/[\w-]+", "<dir>", text)
    text = re.sub(r"\d+", "0", text)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip()


def draws_differently(captured: Path, pin_folder: Path) -> list[str]:
    """The states whose screen differs from the pin's at the same width (or that only one drew)."""
    theirs = {p.name: normalized(p.read_text()) for p in captured.glob("*.txt")}
    widths = {n.rsplit("_", 1)[1] for n in theirs}
    ours = {p.name: normalized(p.read_text()) for p in pin_folder.glob("*.txt") if p.name.rsplit("_", 1)[1] in widths}
    return sorted(s.removesuffix(".txt") for s in set(theirs) | set(ours) if theirs.get(s) != ours.get(s))


def run_capture(name: str, release: str, widths: list[int], work: Path, log: Path,
                corpus: bool) -> dict[str, Any]:
    started = time.monotonic()
    out, report = work / "screens", work / "report.json"
    cmd = [sys.executable, str(REPO / "scripts" / "capture_screens.py"), "--harness", name, "--no-transcripts",
           "--out", str(out), "--report", str(report)]
    for width in widths:
        cmd += ["--width", str(width)]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env_for(name, release), capture_output=True, text=True,
                              timeout=1200)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\nthe capture took over 1200 s", -1
    log.write_text(output)
    result: dict[str, Any] = {"completed": code == 0, "seconds": round(time.monotonic() - started)}
    if code != 0:
        result["reason"] = why(output)
    facts = json.loads(report.read_text()) if report.exists() else {}
    result["not_drawn"] = sorted({str(item["state"]) for item in facts.get("not_drawn", [])})
    cases = [c for c in load_corpus(out) if c.name.startswith(f"{name}/{release}/")] if out.exists() else []
    wrong = {c.name.split("/")[-1]: misses(c, c.read()) for c in cases}
    blind = [c.name.split("/")[-1] for c in cases
             if c.read(with_cursor=False).ready_for_message and not c.expected_ready]
    false_ready = [n for n, m in wrong.items() if any(x.startswith("FALSE READY") for x in m)] + blind
    result.update({
        "screens": len(cases),
        "read_right": sum(not m for m in wrong.values()),
        "false_ready": len(false_ready),
        "misses": {n: m for n, m in wrong.items() if m},
        "false_ready_screens": sorted(set(false_ready)),
    })
    folder = out / name / release
    if cases and release != H.pinned(name):
        differs = draws_differently(folder, CORPUS / name / H.pinned(name))
        result["draws_differently"] = differs
        if corpus and differs:
            # a release read without a miss joins the corpus (tests/unit reads every screen of it as
            # expected); one with misreads goes to screens-misread, where the unit tests hold it to
            # the bar alone: zero false ready-for-message
            for root in (CORPUS, MISREAD):
                shutil.rmtree(root / name / release, ignore_errors=True)
            target = (MISREAD if result["misses"] else CORPUS) / name / release
            shutil.copytree(folder, target)
            result["in_corpus"] = "misread" if result["misses"] else True
    elif release == H.pinned(name):
        result["in_corpus"] = True  # the pin's corpus is committed
    return result


def evaluate(cases: list[Any]) -> dict[str, Any]:
    wrong = {c.name.split("/")[-1]: misses(c, c.read()) for c in cases}
    blind = [c.name.split("/")[-1] for c in cases
             if c.read(with_cursor=False).ready_for_message and not c.expected_ready]
    false_ready = [n for n, m in wrong.items() if any(x.startswith("FALSE READY") for x in m)] + blind
    return {"screens": len(cases), "read_right": sum(not m for m in wrong.values()),
            "false_ready": len(false_ready), "misses": {n: m for n, m in wrong.items() if m},
            "false_ready_screens": sorted(set(false_ready))}


def reexplain(results: dict[str, Any], logs: Path) -> None:
    """Recompute a failed live run's reason from its kept log."""
    for key, entry in results.items():
        if not key.startswith("claude "):  # how Claude Code offers tools: only on a Claude row
            entry.get("live", {}).pop("mcp_tools", None)
        log = logs / f"{key.replace(' ', '-')}-live.log"
        if entry.get("live") and not entry["live"].get("passed") and log.exists():
            entry["live"]["reason"] = why(log.read_text())


def reevaluate(results: dict[str, Any]) -> None:
    """Read the committed captures of each non-pinned release again with the reader as it is now
    (after a reader change): update its evaluation and move it between the corpus and
    screens-misread accordingly."""
    for key, entry in results.items():
        name, release = key.split(" ", 1)
        cap = entry.get("capture")
        if not cap or release == H.pinned(name):
            continue
        for root in (CORPUS, MISREAD):
            folder = root / name / release
            if not folder.is_dir():
                continue
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copytree(folder, Path(tmp) / name / release)
                cap.update(evaluate(load_corpus(Path(tmp))))
            target = (MISREAD if cap["misses"] else CORPUS) / name / release
            if target != folder:
                shutil.rmtree(target, ignore_errors=True)
                shutil.move(str(folder), str(target))
            cap["in_corpus"] = "misread" if cap["misses"] else True
            break


def verdict(entry: dict[str, Any]) -> bool:
    """A release is verified when the live acceptance passed, its capture completed and every screen
    was read without a false ready-for-message."""
    capture = entry.get("capture") or {}
    return bool(entry.get("live", {}).get("passed") and capture.get("completed")
                and capture.get("screens") and capture.get("false_ready") == 0)


def cell_live(entry: dict[str, Any]) -> str:
    live = entry.get("live")
    if not live:
        return "not run"
    if live.get("passed"):
        return "passed" + (f" (MCP tools {live['mcp_tools']})" if live.get("mcp_tools") else "")
    return f"**failed**: {live.get('reason', '?')}"


def cell_capture(entry: dict[str, Any]) -> str:
    cap = entry.get("capture")
    if not cap:
        return "not run"
    text = f"{cap.get('read_right', 0)}/{cap.get('screens', 0)} read right, {cap.get('false_ready', 0)} false ready"
    if cap.get("not_drawn"):
        text += "; not drawn: " + ", ".join(f"`{s}`" for s in cap["not_drawn"])
    if cap.get("misses"):
        text += "; misread: " + ", ".join(f"`{n}` ({'; '.join(m)})" for n, m in sorted(cap["misses"].items()))
    if not cap.get("completed"):
        text = f"**capture stopped**: {cap.get('reason', '?')}; " + text
    return text


def cell_corpus(entry: dict[str, Any], name: str, release: str) -> str:
    cap = entry.get("capture") or {}
    if release == H.pinned(name):
        return "the pin's corpus"
    if cap.get("in_corpus") == "misread" or (MISREAD / name / release).exists():
        return "added to `screens-misread` (held to zero false ready only)"
    if cap.get("in_corpus") or (CORPUS / name / release).exists():
        return f"added ({len(cap.get('draws_differently', []))} screens draw differently)"
    if "draws_differently" in cap:
        if not cap["draws_differently"]:
            return "draws like the pin"
        return "draws differently; not added (misread screens)" if cap.get("misses") else "differs (not added)"
    return ""


def render(results: dict[str, Any]) -> str:
    rows = ["| harness | release | published | live acceptance | screen capture + evaluation | corpus | verified | run |",
            "|---|---|---|---|---|---|---|---|"]

    def order(key: str) -> tuple[str, tuple[int, ...]]:
        name, release = key.split(" ", 1)
        return name, tuple(int(x) for x in re.findall(r"\d+", release))

    for key in sorted(results, key=order):
        name, release = key.split(" ", 1)
        entry = results[key]
        pin = " (pin)" if release == H.pinned(name) else ""
        rows.append(f"| {NAMES.get(name, name)} | {release}{pin} | {entry.get('published', '?')} | "
                    f"{cell_live(entry)} | {cell_capture(entry)} | {cell_corpus(entry, name, release)} | "
                    f"{'yes' if verdict(entry) else '**no**'} | {entry.get('date', '?')} |")
    return "\n".join(rows)


def write_doc(results: dict[str, Any]) -> None:
    text = DOC.read_text()
    table = f"{START}\n{render(results)}\n{END}"
    if START in text and END in text:
        text = text[:text.index(START)] + table + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n" + table + "\n"
    DOC.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claude", help="Claude Code releases, comma-separated")
    parser.add_argument("--codex", help="Codex releases, comma-separated")
    parser.add_argument("--opencode", help="OpenCode releases, comma-separated")
    parser.add_argument("--no-pin", action="store_true", help="do not add the pinned releases")
    parser.add_argument("--width", type=int, action="append", choices=[80, 160],
                        help="capture widths (default both)")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-capture", action="store_true")
    parser.add_argument("--corpus", action="store_true",
                        help="add the screens of a release that draws differently to tests/fixtures/screens")
    parser.add_argument("--render", action="store_true",
                        help="only re-read the committed captures with the current reader and rewrite the matrix")
    parser.add_argument("--logs", type=Path, default=REPO / ".cache" / "compat", help="run logs")
    args = parser.parse_args(argv)
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.render:
        reexplain(results, args.logs)
        reevaluate(results)
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        write_doc(results)
        return 0
    wanted = {"claude": releases(args.claude), "codex": releases(args.codex), "opencode": releases(args.opencode)}
    if not args.no_pin:
        for name in wanted:
            if H.pinned(name) not in wanted[name]:
                wanted[name].append(H.pinned(name))
    args.logs.mkdir(parents=True, exist_ok=True)
    widths = args.width or [80, 160]
    failed = 0
    for name, versions in wanted.items():
        dates = release_dates(H.PACKAGES[name][0]) if versions else {}
        for release in versions:
            key = f"{name} {release}"
            print(f"== {NAMES[name]} {release}", flush=True)
            entry: dict[str, Any] = dict(results.get(key, {}))
            entry["published"] = dates.get(release, entry.get("published", "?"))
            entry["date"] = dt.datetime.now(dt.UTC).date().isoformat()
            try:
                H.install(name, release)
            except (subprocess.SubprocessError, OSError, RuntimeError) as exc:
                entry["live"] = {"passed": False, "reason": f"npm install failed: {str(exc)[:200]}"}
                entry.pop("capture", None)
                results[key] = entry
                failed += 1
                continue
            stem = f"{name}-{release}"
            if not args.skip_live:
                entry["live"] = run_live(name, release, args.logs / f"{stem}-live.log")
                print(f"   live acceptance: {cell_live(entry)}", flush=True)
            if not args.skip_capture:
                with tempfile.TemporaryDirectory(prefix=f"connect-compat-{stem}-") as work:
                    entry["capture"] = run_capture(name, release, widths, Path(work), args.logs / f"{stem}-capture.log",
                                                   args.corpus)
                print(f"   capture: {cell_capture(entry)}", flush=True)
            failed += not verdict(entry)
            results[key] = entry
            RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
            write_doc(results)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    write_doc(results)
    print(f"matrix written to {DOC.relative_to(REPO)} ({failed} release(s) not verified)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
