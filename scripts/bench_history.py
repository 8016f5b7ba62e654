#!/usr/bin/env python3
"""Benchmark the session history index against ripgrep on generated transcript corpora.

Generates N sessions (default 10,000: 80% Claude Code, 20% Codex, about 10 human prompts each with
tool calls, tool results and replies of realistic sizes, some Claude sessions with a subagent) in the
real on-disk layouts under a temporary directory, then measures, each beside a baseline from the same
run:

* the full index build (readers build the rows; written to a new file, copied into the index) with a
  reader per core vs the previous build (an incremental pass into an empty index, which is what
  ``--full`` did before), and the same full build with one reader;
* the index file's size vs the transcripts';
* ``find_sessions`` p50/p95 (fleet-wide and repo-scoped) vs ``rg -l -i`` for the same terms;
* a new or grown transcript becoming searchable with the watcher running (written -> returned by the
  index) vs what a search paid before the watcher: a catch-up scan of every transcript, then the read;
* the catch-up scan when nothing changed (now only the safety net when the watcher starts).

``--large 100000`` repeats the build, size and search rows on a second, larger corpus (one pass per
query there: it is slow to generate and to scan with rg). Prints markdown and writes it to ``--out``.
Needs ``rg``: on PATH or beside this Python (``pip install ripgrep==14.1.0``, a wheel), else
``apt-get install -y ripgrep``. ``--sessions 1000`` gives a quick run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from connectcore.history import Harness  # noqa: E402
from connectd.history.service import HistoryService  # noqa: E402
from connectd.history.watch import HistoryWatcher  # noqa: E402

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

RG: str | None = None


def find_rg() -> str | None:
    """``rg`` on PATH, or beside this Python (the ``ripgrep`` wheel installs it into the venv)."""
    found = shutil.which("rg")
    if found:
        return found
    beside = Path(sys.executable).parent / "rg"
    return str(beside) if beside.exists() else None


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def rg(args: list[str]) -> float:
    assert RG is not None
    t0 = time.perf_counter()
    subprocess.run([RG, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def p50_p95(samples: list[float]) -> str:
    return f"{ms(pct(samples, 0.5))} / {ms(pct(samples, 0.95))}"


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def corpus(root: Path, sessions: int, seed: int) -> dict[str, int]:
    """Generate a corpus under ``root``, or reuse the one already there (``corpus.json``)."""
    meta = root / "corpus.json"
    if meta.exists():
        stats = json.loads(meta.read_text())
        if stats.get("sessions") == sessions and stats.get("seed") == seed:
            print(f"reusing the corpus in {root}", file=sys.stderr)
            return dict(stats)
        shutil.rmtree(root)
    t0 = time.perf_counter()
    stats = generate(root, sessions, seed)
    stats["seed"] = seed
    meta.write_text(json.dumps(stats))
    print(
        f"generated {stats['sessions']} sessions, {stats['prompts']} prompts, {stats['files']} files, "
        f"{stats['bytes'] / 1e6:.0f} MB in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
    )
    return stats


def cpu_split() -> tuple[float, float]:
    """CPU seconds of this process and of its reaped children (the reader processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def cpu_now() -> float:
    return sum(cpu_split())


class Built:
    """One build of the index: wall and CPU seconds (the writer's, this process, and the readers')."""

    def __init__(self, wall: float, writer: float, readers: float, svc: HistoryService) -> None:
        self.wall, self.writer, self.readers, self.svc = wall, writer, readers, svc

    @property
    def cpu(self) -> float:
        return self.writer + self.readers

    def __str__(self) -> str:
        return f"{ms(self.wall)} ({self.cpu:.1f} CPU s)"


def build(root: Path, data: Path, workers: int | None, *, full: bool = True) -> Built:
    """A build into an empty data directory: ``full`` (``connectd history index --full``), else an
    incremental pass into the empty index (the previous full build: it emptied the index, then ran
    this pass)."""
    shutil.rmtree(data, ignore_errors=True)
    svc = HistoryService(data, root / "claude", root / "codex", pane_pids=dict, catch_up_interval=0)
    (w0, r0), t0 = cpu_split(), time.perf_counter()
    svc.index.update(svc.claude_root, svc.codex_root, full=full, workers=workers)
    wall = time.perf_counter() - t0
    w1, r1 = cpu_split()
    return Built(wall, w1 - w0, r1 - r0, svc)


def db_size(data: Path) -> int:
    return sum(p.stat().st_size for p in data.iterdir() if p.name.startswith("history.db"))


QUERIES = [
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
]


def searches(
    svc: HistoryService, root: Path, seed: int, repeat: int, rg_repeat: int
) -> dict[str, list[float]]:
    vocab = Text(random.Random(seed)).vocab
    queries = QUERIES + vocab[2000:2010]
    repo = str(root / "work" / "repo07")
    roots = [str(root / "claude"), str(root / "codex")]
    out: dict[str, list[float]] = {"fleet": [], "scoped": [], "rg": [], "queries": [float(len(queries))]}
    for q in queries:
        svc.find_sessions(q, limit=10, catch_up=False, pane_pids={})  # first touch of its pages
        for _ in range(repeat):
            t0 = time.perf_counter()
            svc.find_sessions(q, limit=10, catch_up=False, pane_pids={})
            out["fleet"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            svc.find_sessions(q, repo=repo, limit=10, catch_up=False, pane_pids={})
            out["scoped"].append(time.perf_counter() - t0)
        terms = q.split()
        for _ in range(rg_repeat):
            out["rg"].append(rg(["-l", "-i", "-F", *[a for t in terms for a in ("-e", t)], *roots]))
    return out


def session_lines(sid: str, cwd: str, word: str, first: int, n: int) -> str:
    return "".join(
        dumps(
            {
                "type": "user",
                "sessionId": sid,
                "cwd": cwd,
                "message": {"role": "user", "content": f"session prompt {i} about {word} tuning"},
                "timestamp": f"2026-01-01T00:{i % 60:02d}:00Z",
            }
        )
        + "\n"
        for i in range(first, first + n)
    )


class Watching:
    """A HistoryWatcher on the service, in its own thread and event loop (as in the daemon)."""

    def __init__(self, svc: HistoryService) -> None:
        self.svc = svc
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import anyio
        import anyio.to_thread

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(HistoryWatcher(self.svc).run)
                await anyio.to_thread.run_sync(self._stop.wait)
                tg.cancel_scope.cancel()

        anyio.run(main)

    def __enter__(self) -> Watching:
        self._thread.start()
        deadline = time.monotonic() + 120
        while not self.svc.watching:
            if time.monotonic() > deadline:
                raise RuntimeError("the history watcher did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def wait_searchable(svc: HistoryService, sid: str, word: str, timeout: float = 30.0) -> float:
    """Seconds until ``find_sessions(word)`` returns ``sid``: the entry is polled cheaply (every 1 ms),
    then the search confirms it. Raises if it never appears."""
    t0 = time.perf_counter()
    while True:
        e = svc.index.get(Harness.CLAUDE, sid, with_prompts=True)
        if e is not None and any(word in p for p in e.prompts):
            took = time.perf_counter() - t0
            break
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"{sid} never became searchable")
        time.sleep(0.001)
    hits = svc.find_sessions(word, limit=100, catch_up=False, pane_pids={})
    if sid not in {h["session_id"] for h in hits}:
        raise RuntimeError(f"{sid} has an entry but find_sessions({word!r}) does not return it")
    return took


def freshness(svc: HistoryService, root: Path, trials: int) -> dict[str, list[float]]:
    """New and grown transcripts: with the watcher vs a catch-up scan then the read (the old path)."""
    repo = str(root / "work" / "repo07")
    proj = root / "claude" / "projects" / "-bench-new"
    out: dict[str, list[float]] = {"new": [], "grown": [], "new_scan": [], "grown_scan": [], "idle_cpu": []}
    # Baseline first, without the watcher: what a search paid before it (catch-up scan + read).
    for i in range(trials):
        sid = f"eeeeeeee-0000-4000-8000-{i:012d}"
        path = proj / f"{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        word = f"quasarscan{i}"
        t0 = time.perf_counter()
        path.write_text(session_lines(sid, repo, word, 0, 10))
        svc.update()
        out["new_scan"].append(time.perf_counter() - t0)
        word2 = f"pulsarscan{i}"
        t0 = time.perf_counter()
        with open(path, "a") as f:
            f.write(session_lines(sid, repo, word2, 10, 1))
        svc.update()
        out["grown_scan"].append(time.perf_counter() - t0)
    with Watching(svc):
        c0, t0 = cpu_now(), time.perf_counter()
        time.sleep(10.0)
        out["idle_cpu"].append((cpu_now() - c0) / (time.perf_counter() - t0) * 60)
        for i in range(trials):
            sid = f"ffffffff-0000-4000-8000-{i:012d}"
            path = proj / f"{sid}.jsonl"
            word = f"quasar{i}"
            path.write_text(session_lines(sid, repo, word, 0, 10))
            out["new"].append(wait_searchable(svc, sid, word))
            time.sleep(0.2)
            word2 = f"pulsar{i}"
            with open(path, "a") as f:
                f.write(session_lines(sid, repo, word2, 10, 1))
            out["grown"].append(wait_searchable(svc, sid, word2))
            time.sleep(0.2)
    shutil.rmtree(proj, ignore_errors=True)  # a kept corpus stays as generated
    return out


def run(
    root: Path, sessions: int, seed: int, *, repeat: int, rg_repeat: int, full: bool
) -> list[tuple[str, str, str, str]]:
    """Measure one corpus; ``full``: also the one-reader build and the freshness rows."""
    stats = corpus(root, sessions, seed)
    roots = [str(root / "claude"), str(root / "codex")]
    rg(["-c", "-F", "warm-the-page-cache-zzqx", *roots])  # both sides start from a warm cache
    rg_scan = rg(["-c", "-F", "zzqx-term-that-is-nowhere", *roots])
    data = root / "data"
    previous = one = None
    if full:
        previous = build(root, data, workers=None, full=False)
        previous.svc.close()
        one = build(root, data, workers=1)
        one.svc.close()
    built = build(root, data, workers=None)
    svc = built.svc
    from connectd.history.reader import default_workers

    size = db_size(data)
    entries = svc.index.count()
    t0 = time.perf_counter()
    noop = svc.update()
    noop_s = time.perf_counter() - t0
    found = searches(svc, root, seed, repeat, rg_repeat)
    fleet, scoped, rgs = found["fleet"], found["scoped"], found["rg"]
    label = f"{sessions:,}"
    rows = [
        (
            f"Corpus ({label})",
            f"{stats['sessions']:,} sessions, {stats['prompts']:,} prompts, {stats['files']:,} transcripts, "
            f"{stats['bytes'] / 1e6:,.0f} MB",
            "",
            f"prompt text {stats['prompt_bytes'] / 1e6:.1f} MB ({100 * stats['prompt_bytes'] / stats['bytes']:.1f}%"
            " of the bytes); the rest is tool calls, tool output and replies",
        ),
        (
            f"Full index build ({label}; `connectd history index --full`)",
            str(built),
            f"the previous build (an incremental pass into an empty index): {previous}:"
            f" {previous.wall / built.wall:.1f}x the wall time, {previous.cpu / built.cpu:.1f}x the CPU"
            if previous
            else "(the previous build not run at this size)",
            f"{default_workers()} reader processes (one per core) + the writer; {entries:,} entries;"
            f" CPU s writer / readers {built.writer:.1f} / {built.readers:.1f}"
            + (f" (previous build {previous.writer:.1f} / {previous.readers:.1f})" if previous else "")
            + (f"; one reader (in the writer's process): {one}" if one else ""),
        ),
        (
            f"Index size ({label})",
            f"{mb(size)}",
            f"transcripts {mb(stats['bytes'])}",
            f"{100 * size / stats['bytes']:.1f}% of the transcripts, {size / max(stats['prompt_bytes'], 1):.1f}x "
            "the prompt text (entries, postings, parser states)",
        ),
        (
            f"`rg` scanning the same transcripts once ({label})",
            ms(rg_scan),
            "",
            "a term found nowhere, so every byte is read",
        ),
        (
            f"`find_sessions` fleet-wide, p50 / p95 ({label})",
            p50_p95(fleet),
            f"`rg -l -i` {p50_p95(rgs)}: {pct(rgs, 0.5) / pct(fleet, 0.5):.0f}x slower at p50",
            f"{int(found['queries'][0])} queries x {repeat}, limit 10, no catch-up; rg x {rg_repeat}: files only, no ranking",
        ),
        (
            f"`find_sessions` one repo, p50 / p95 ({label})",
            p50_p95(scoped),
            f"`rg -l -i` {p50_p95(rgs)}: {pct(rgs, 0.5) / pct(scoped, 0.5):.0f}x slower at p50",
            "repo filter in the SQL",
        ),
        (
            f"Catch-up scan when nothing changed ({label})",
            ms(noop_s),
            "",
            f"stat of {noop.files_seen:,} transcripts; now only when the watcher (re)starts, or without a daemon",
        ),
    ]
    if full:
        fresh = freshness(svc, root, trials=10)
        rows += [
            (
                "New transcript searchable (watcher), p50 / p95",
                p50_p95(fresh["new"]),
                f"catch-up scan + read: {p50_p95(fresh['new_scan'])}",
                "written -> `find_sessions` returns it; 10 sessions of 10 prompts, in an existing project directory",
            ),
            (
                "Grown transcript searchable (watcher), p50 / p95",
                p50_p95(fresh["grown"]),
                f"catch-up scan + read: {p50_p95(fresh['grown_scan'])}",
                "one prompt appended -> found by its new word; read from the stored offset",
            ),
            (
                "Watcher idle CPU",
                f"{fresh['idle_cpu'][0]:.2f} CPU s/min",
                "",
                "this process, 10 s, nothing written (the notifier wakes every 20 ms)",
            ),
        ]
    svc.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    global RG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=0, help="also a corpus of this many sessions (one pass)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5, help="runs per query")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks-history.md")
    ap.add_argument("--keep", type=Path, default=None, help="generate here and keep (or reuse) the corpora")
    args = ap.parse_args(argv)
    RG = find_rg()
    if RG is None:
        print(
            "bench_history: ripgrep (rg) is not on PATH nor beside this Python; install it with "
            "`pip install ripgrep==14.1.0` (a wheel) or `apt-get install -y ripgrep`",
            file=sys.stderr,
        )
        return 2
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-history-"))
    try:
        rows = run(
            tmp / f"c{args.sessions}",
            args.sessions,
            args.seed,
            repeat=args.repeat,
            rg_repeat=max(1, args.repeat // 2),
            full=True,
        )
        if args.large:
            try:
                rows += run(tmp / f"c{args.large}", args.large, args.seed, repeat=1, rg_repeat=1, full=False)
            except Exception as exc:  # the 10k table is still written; the row says why
                rows.append(
                    (f"{args.large:,}-session corpus", "not measured", "", f"{type(exc).__name__}: {exc}")
                )
            finally:
                if args.keep is None:
                    shutil.rmtree(tmp / f"c{args.large}", ignore_errors=True)
        load = os.getloadavg()
        machine = (
            f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs (load average {load[0]:.1f} at the end: "
            f"the machine is shared), Python {platform.python_version()}"
        )
        rgv = subprocess.run([RG, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        table = ["| Measure | Result | Baseline in the same run | Notes |", "| --- | --- | --- | --- |"] + [
            f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows
        ]
        large = f" --large {args.large}" if args.large else ""
        text = "\n".join(
            [
                "# Session history benchmark",
                "",
                f"Generated by `scripts/bench_history.py --sessions {args.sessions}{large} --seed {args.seed}` on {machine}, "
                f"{rgv}, SQLite {__import__('sqlite3').sqlite_version}, page cache warm for both sides. "
                f"Queries run {args.repeat} times each on the {args.sessions:,}-session corpus"
                + (
                    f" and once each on the {args.large:,}-session corpus (rg once per query there too)"
                    if args.large
                    else ""
                )
                + "; wall times on a shared machine are noisy, CPU seconds less so.",
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
