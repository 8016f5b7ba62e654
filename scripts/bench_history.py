#!/usr/bin/env python3
"""Benchmark the session history index against ripgrep on a generated transcript corpus.

Generates N sessions (default 10,000: 80% Claude Code, 20% Codex, about 10 human prompts each with
tool calls, tool results and replies of realistic sizes, some Claude sessions with a subagent) in the
real on-disk layouts under a temporary directory, then measures:

* the full index build vs one ``rg`` pass over the same transcripts;
* ``find_sessions`` p50/p95 (fleet-wide and repo-scoped) vs ``rg -l`` for the same terms;
* an incremental update when nothing changed (what a search pays to catch up first);
* indexing one new session into the built index.

Prints a markdown table and writes it to docs/benchmarks-history.md. Needs ``rg`` on PATH
(``apt-get install -y ripgrep``). ``--sessions 1000`` gives a quick run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from connectd.history.service import HistoryService  # noqa: E402

# ---------------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------------

_TECH_TEXT = (
    "parser websocket reconnect backoff migration schema billing invoice oauth login token refresh cache "
    "eviction latency tracing metrics dashboard flaky test fixture retry timeout deadlock mutex queue worker "
    "scheduler cron deploy kubernetes helm terraform docker image registry build pipeline lint format typing "
    "refactor rename extract module package dependency upgrade security audit permission role tenant "
    "pagination cursor index query planner vacuum replica failover snapshot backup restore upload download "
    "stream buffer encoding unicode locale timezone calendar notification email webhook signature "
    "checksum compression archive export import csv json yaml protobuf grpc http router middleware session "
    "cookie csrf cors header proxy tls certificate rotate secret vault config feature flag rollout canary"
)
TECH = _TECH_TEXT.split()
_FILLER_TEXT = (
    "the a to and of in for on with that this it is be as please can you we should make sure also then "
    "when where what why how there here now just still again after before into from by at or not but all "
    "some any each more less first next last new old same other into over under only very really"
)
FILLER = _FILLER_TEXT.split()


def make_vocab(rng: random.Random, n: int = 3000) -> list[str]:
    syll = ["ka", "lo", "mi", "ru", "te", "zo", "ne", "pa", "qi", "sh", "ve", "do", "xu", "fi", "ga", "bo"]
    words = set(TECH)
    while len(words) < n:
        words.add("".join(rng.choice(syll) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Text:
    """Zipf-ish text from a fixed vocabulary, so some words are common and most are rare."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.vocab = make_vocab(rng)
        self.weights = [1.0 / (i + 1) ** 0.9 for i in range(len(self.vocab))]
        rng.shuffle(self.vocab)
        self._pool = rng.choices(self.vocab, self.weights, k=200_000)
        self._i = 0

    def words(self, n: int) -> str:
        out = []
        for _ in range(n):
            if self.rng.random() < 0.45:
                out.append(self.rng.choice(FILLER))
            else:
                self._i = (self._i + 1) % len(self._pool)
                out.append(self._pool[self._i])
        return " ".join(out)


def dumps(obj: object) -> str:
    """Compact JSON, as Claude Code and Codex write it."""
    return json.dumps(obj, separators=(",", ":"))


def iso(dt: datetime) -> str:
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generate(root: Path, sessions: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    text = Text(rng)
    tool_pool = [text.words(rng.randint(20, 300)) for _ in range(400)]
    reply_pool = [text.words(rng.randint(15, 120)) for _ in range(400)]
    repos = []
    for i in range(40):
        repo = root / "work" / f"repo{i:02d}"
        (repo / ".git").mkdir(parents=True)
        repos.append(repo)
    claude_root, codex_root = root / "claude", root / "codex"
    start = datetime(2025, 1, 1, tzinfo=UTC)
    stats = {"sessions": 0, "prompts": 0, "files": 0, "bytes": 0, "prompt_bytes": 0}
    titles = []
    for n in range(sessions):
        repo = rng.choice(repos)
        cwd = str(repo if rng.random() < 0.8 else repo / "pkg")
        base = start + timedelta(minutes=rng.randint(0, 60 * 24 * 600))
        branch = rng.choice(["main", "main", f"feat/{text.words(1)}-{text.words(1)}", f"fix/{text.words(1)}"])
        n_prompts = max(1, min(30, int(rng.expovariate(1 / 10))))
        sid = f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-8{rng.getrandbits(12):03x}-{rng.getrandbits(48):012x}"
        lines: list[str] = []
        minute = 0
        if n % 5 != 4:
            common = {
                "isSidechain": False,
                "userType": "external",
                "cwd": cwd,
                "sessionId": sid,
                "version": "2.1.332",
                "gitBranch": branch,
                "entrypoint": "cli" if rng.random() < 0.9 else "sdk-cli",
            }
            for _ in range(n_prompts):
                minute += rng.randint(1, 9)
                prompt = text.words(rng.randint(8, 60))
                stats["prompt_bytes"] += len(prompt.encode())
                lines.append(
                    dumps(
                        {
                            **common,
                            "type": "user",
                            "message": {"role": "user", "content": prompt},
                            "uuid": f"u{minute}",
                            "timestamp": iso(base + timedelta(minutes=minute)),
                        }
                    )
                )
                for t in range(rng.randint(1, 4)):
                    out = rng.choice(tool_pool)
                    lines.append(
                        dumps(
                            {
                                **common,
                                "type": "assistant",
                                "message": {
                                    "role": "assistant",
                                    "content": [
                                        {
                                            "type": "tool_use",
                                            "id": f"t{minute}{t}",
                                            "name": "Bash",
                                            "input": {"command": "rg " + text.words(2)},
                                        }
                                    ],
                                },
                                "uuid": f"a{minute}{t}",
                                "timestamp": iso(base + timedelta(minutes=minute, seconds=t)),
                            }
                        )
                    )
                    lines.append(
                        dumps(
                            {
                                **common,
                                "type": "user",
                                "message": {
                                    "role": "user",
                                    "content": [
                                        {
                                            "tool_use_id": f"t{minute}{t}",
                                            "type": "tool_result",
                                            "content": out,
                                        }
                                    ],
                                },
                                "toolUseResult": {"stdout": out, "stderr": ""},
                                "uuid": f"r{minute}{t}",
                                "timestamp": iso(base + timedelta(minutes=minute, seconds=t + 1)),
                            }
                        )
                    )
                reply = rng.choice(reply_pool)
                if rng.random() < 0.05:
                    reply += f" https://github.com/acme/repo/pull/{rng.randint(1, 9999)}"
                lines.append(
                    dumps(
                        {
                            **common,
                            "type": "assistant",
                            "message": {"role": "assistant", "content": [{"type": "text", "text": reply}]},
                            "uuid": f"x{minute}",
                            "timestamp": iso(base + timedelta(minutes=minute, seconds=30)),
                        }
                    )
                )
            if rng.random() < 0.6:
                lines.append(
                    dumps({"type": "ai-title", "aiTitle": text.words(rng.randint(3, 6)), "sessionId": sid})
                )
            path = claude_root / "projects" / cwd.replace("/", "-") / f"{sid}.jsonl"
            if rng.random() < 0.1:
                agent = f"a{rng.getrandbits(64):016x}"
                sub = path.with_suffix("") / "subagents" / f"agent-{agent}.jsonl"
                sub.parent.mkdir(parents=True, exist_ok=True)
                sub_common = {**common, "isSidechain": True, "agentId": agent}
                body = (
                    "\n".join(
                        [
                            dumps(
                                {
                                    **sub_common,
                                    "type": "user",
                                    "message": {"role": "user", "content": text.words(40)},
                                    "timestamp": iso(base),
                                }
                            ),
                            dumps(
                                {
                                    **sub_common,
                                    "type": "user",
                                    "message": {
                                        "role": "user",
                                        "content": [
                                            {
                                                "type": "tool_result",
                                                "tool_use_id": "t",
                                                "content": rng.choice(tool_pool),
                                            }
                                        ],
                                    },
                                    "timestamp": iso(base),
                                }
                            ),
                        ]
                    )
                    + "\n"
                )
                sub.write_text(body)
                stats["files"] += 1
                stats["bytes"] += len(body)
        else:
            meta = {
                "id": sid,
                "timestamp": iso(base),
                "cwd": cwd,
                "originator": "codex-tui",
                "cli_version": "0.171.0",
                "source": "cli",
                "git": {"branch": branch},
                "base_instructions": {"text": "You are Codex. " * 400},
            }
            lines.append(dumps({"timestamp": iso(base), "type": "session_meta", "payload": meta}))
            lines.append(
                dumps(
                    {
                        "timestamp": iso(base),
                        "type": "response_item",
                        "payload": {
                            "type": "message",
                            "role": "user",
                            "content": [
                                {
                                    "type": "input_text",
                                    "text": f"<environment_context>\n  <cwd>{cwd}</cwd>\n</environment_context>",
                                }
                            ],
                        },
                    }
                )
            )
            for _ in range(n_prompts):
                minute += rng.randint(1, 9)
                at = iso(base + timedelta(minutes=minute))
                prompt = text.words(rng.randint(8, 60))
                stats["prompt_bytes"] += len(prompt.encode())
                lines.append(
                    dumps(
                        {
                            "timestamp": at,
                            "type": "response_item",
                            "payload": {
                                "type": "message",
                                "role": "user",
                                "content": [{"type": "input_text", "text": prompt}],
                            },
                        }
                    )
                )
                for t in range(rng.randint(1, 4)):
                    lines.append(
                        dumps(
                            {
                                "timestamp": at,
                                "type": "response_item",
                                "payload": {
                                    "type": "function_call",
                                    "name": "shell_command",
                                    "arguments": dumps({"command": "rg " + text.words(2)}),
                                    "call_id": f"c{minute}{t}",
                                },
                            }
                        )
                    )
                    lines.append(
                        dumps(
                            {
                                "timestamp": at,
                                "type": "response_item",
                                "payload": {
                                    "type": "function_call_output",
                                    "call_id": f"c{minute}{t}",
                                    "output": rng.choice(tool_pool),
                                },
                            }
                        )
                    )
                lines.append(
                    dumps(
                        {
                            "timestamp": at,
                            "type": "response_item",
                            "payload": {
                                "type": "message",
                                "role": "assistant",
                                "content": [{"type": "output_text", "text": rng.choice(reply_pool)}],
                            },
                        }
                    )
                )
            day = base.strftime("%Y/%m/%d")
            path = codex_root / "sessions" / day / f"rollout-{base.strftime('%Y-%m-%dT%H-%M-%S')}-{sid}.jsonl"
            if rng.random() < 0.7:
                titles.append(dumps({"id": sid, "thread_name": text.words(4), "updated_at": iso(base)}))
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "\n".join(lines) + "\n"
        path.write_text(body)
        stats["sessions"] += 1
        stats["prompts"] += n_prompts
        stats["files"] += 1
        stats["bytes"] += len(body)
    (codex_root).mkdir(parents=True, exist_ok=True)
    (codex_root / "session_index.jsonl").write_text("\n".join(titles) + "\n")
    return stats


# ---------------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def rg(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(["rg", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5, help="runs per query")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks-history.md")
    ap.add_argument("--keep", type=Path, default=None, help="generate here and keep it")
    args = ap.parse_args(argv)
    if shutil.which("rg") is None:
        print(
            "bench_history: ripgrep (rg) is not on PATH; install it with: apt-get install -y ripgrep",
            file=sys.stderr,
        )
        return 2
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-history-"))
    try:
        t0 = time.perf_counter()
        corpus = generate(tmp, args.sessions, args.seed)
        gen_s = time.perf_counter() - t0
        print(
            f"generated {corpus['sessions']} sessions, {corpus['prompts']} prompts, {corpus['files']} files, "
            f"{corpus['bytes'] / 1e6:.0f} MB in {gen_s:.1f}s",
            file=sys.stderr,
        )
        roots = [str(tmp / "claude"), str(tmp / "codex")]
        rg(["-c", "-F", "warm-the-page-cache-zzqx", *roots])  # both sides start from a warm cache
        rg_scan = rg(["-c", "-F", "zzqx-term-that-is-nowhere", *roots])

        svc = HistoryService(tmp / "data", tmp / "claude", tmp / "codex", pane_pids=dict, catch_up_interval=0)
        t0 = time.perf_counter()
        report = svc.update(full=True)
        build_s = time.perf_counter() - t0
        db_bytes = (tmp / "data" / "history.db").stat().st_size
        entries = svc.index.count()

        t0 = time.perf_counter()
        svc.update()
        noop_s = time.perf_counter() - t0

        vocab = Text(random.Random(args.seed)).vocab
        queries = [
            "websocket reconnect",
            "billing",
            "oauth token refresh",
            "flaky test",
            "kubernetes deploy",
            "parser",
            "migration schema",
            "canary rollout",
            "csrf cookie",
            "grpc",
        ] + vocab[2000:2010]
        repo = str(tmp / "work" / "repo07")
        fleet, scoped, rg_times = [], [], []
        for q in queries:
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                svc.find_sessions(q, limit=10, catch_up=False, pane_pids={})
                fleet.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                svc.find_sessions(q, repo=repo, limit=10, catch_up=False, pane_pids={})
                scoped.append(time.perf_counter() - t0)
            terms = q.split()
            for _ in range(max(1, args.repeat // 2)):
                rg_times.append(rg(["-l", "-i", "-F", *[a for t in terms for a in ("-e", t)], *roots]))

        sid = "ffffffff-0000-4000-8000-000000000001"
        new = tmp / "claude" / "projects" / "-bench-new" / f"{sid}.jsonl"
        new.parent.mkdir(parents=True)
        new.write_text(
            "\n".join(
                dumps(
                    {
                        "type": "user",
                        "sessionId": sid,
                        "cwd": repo,
                        "message": {
                            "role": "user",
                            "content": f"brand new session number {i} about quasar tuning",
                        },
                        "timestamp": "2026-01-01T00:00:00Z",
                    }
                )
                for i in range(10)
            )
            + "\n"
        )
        t0 = time.perf_counter()
        one = svc.update()
        one_s = time.perf_counter() - t0
        assert one.files_read == 1 and svc.find_sessions("quasar", catch_up=False, pane_pids={})
        svc.close()

        rows = [
            (
                "Corpus",
                f"{corpus['sessions']:,} sessions, {corpus['prompts']:,} prompts, {corpus['files']:,} transcripts, "
                f"{corpus['bytes'] / 1e6:,.0f} MB",
                f"prompt text {corpus['prompt_bytes'] / 1e6:.1f} MB ({100 * corpus['prompt_bytes'] / corpus['bytes']:.1f}%"
                " of the bytes); the rest is tool calls, tool output and replies",
            ),
            (
                "Full index build (`connectd history index --full`)",
                ms(build_s),
                f"{entries:,} entries, index {db_bytes / 1e6:.1f} MB ({100 * db_bytes / corpus['bytes']:.1f}% of the"
                f" transcripts, {db_bytes / max(corpus['prompt_bytes'], 1):.1f}x the prompt text)",
            ),
            (
                "`rg` scanning the same transcripts once",
                ms(rg_scan),
                "a term found nowhere, so every byte is read",
            ),
            (
                "`find_sessions` fleet-wide, p50 / p95",
                f"{ms(pct(fleet, 0.5))} / {ms(pct(fleet, 0.95))}",
                f"{len(queries)} queries x {args.repeat}, limit 10, no catch-up",
            ),
            (
                "`find_sessions` one repo, p50 / p95",
                f"{ms(pct(scoped, 0.5))} / {ms(pct(scoped, 0.95))}",
                "repo filter in the SQL",
            ),
            (
                "`rg -l -i` for the same terms, p50 / p95",
                f"{ms(pct(rg_times, 0.5))} / {ms(pct(rg_times, 0.95))}",
                "finds files only: no ranking, no tool-output exclusion",
            ),
            ("Catch-up when nothing changed", ms(noop_s), f"stat of {report.files_seen:,} transcripts"),
            ("Index one new session into the built index", ms(one_s), "includes the catch-up scan"),
        ]
        load = os.getloadavg()[0]
        machine = (
            f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs (load average {load:.1f} at the end: "
            f"the machine is shared), Python {platform.python_version()}"
        )
        rgv = subprocess.run(["rg", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        table = ["| Measure | Result | Notes |", "| --- | --- | --- |"] + [
            f"| {a} | {b} | {c} |" for a, b, c in rows
        ]
        text = "\n".join(
            [
                "# Session history benchmark",
                "",
                f"Generated by `scripts/bench_history.py --sessions {args.sessions} --seed {args.seed}` on {machine}, "
                f"{rgv}, SQLite {__import__('sqlite3').sqlite_version}, page cache warm for both sides.",
                "",
                *table,
                "",
            ]
        )
        print(text)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
