"""Federation (issue 25): confirmed delivery across two boxes, ten daemons on one NATS server, and a
federated daemon's CPU while idle, each beside its baseline measured in the same run.

Every box is a real ``connectd serve`` with its own data directory, HOME and private tmux server, on one
real ``nats-server`` (``sync_interval: always``), set up and paired by the real CLI with both approvals
(:mod:`tests.support.federation`, the e2e tests' own helpers). The agents are the stand-in
(``connectd.cli.demo_agent``) launched through each daemon; the bench acts as a sender over MCP with its
token, as the one-box delivery section does. Each box keeps its defaults (no quick resend), with the
limits of the other daemon sections out of the way (``QUEUED_POLICY``: a sender's 10 messages a minute
to one pair would refuse the trials).

- :func:`two_boxes`: boxes laptop (A) and devbox (B). B runs the recipient R (``/busy 0.3``) and a local
  sender L; A runs the remote sender S. Both pairs are approved once beforehand (a first message's card,
  "approve pair"), so no card waits. The trials alternate on the same pane: S sends R a message by its
  address qualified by box (``%N@TOKEN@devbox``) and calls ``get_message`` with a wait on A, which
  returns when B's signed ``delivered`` receipt has come back; then L sends R the same text on B
  (one box). "Received" is when R's own log recorded the prompt. Then the idle window: A, B, a daemon
  that does not federate (started for it, with one idle agent as A has) and the NATS server, their CPU
  over the same minute.
- :func:`ten_boxes`: ten boxes in a ring (box i paired with box i+1), each with a sender and a
  recipient (``/busy 0.2``); every sender sends its messages to the next box's recipient at once, then
  waits for each one's final outcome. The baseline, run first on the same daemons, is each box's sender
  sending the same count to its own box's recipient (docs/federation.md, "Test plan"). Accounted: every admitted message's outcome on its sender's box (``get_message``) and
  its final records in the sender box's audit log (exactly one each), and how often each was typed on
  the recipient's (at most once; once when delivered).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchlib.common import AgentHandle, DaemonProcess, Fleet, _Daemon, cpu_seconds, log, pct, wait_for
from benchlib.delivery import TEXT
from benchlib.memory import QUEUED_POLICY
from connectcore.delivery import FINAL
from connectcore.screen import Activity, Composer, read_screen
from tests.support.daemon import call, mcp_agent
from tests.support.federation import Box, federated_boxes, pair
from tests.support.tmux_server import TmuxServer

FINALS = frozenset(s.value for s in FINAL)
WAIT = 30  # get_message's wait, seconds


def _daemon(root: Path, tmux: TmuxServer) -> DaemonProcess:
    return _Daemon(root, tmux, policy=QUEUED_POLICY)


@contextmanager
def _boxes(root: Path, names: list[str]) -> Iterator[tuple[list[Box], Any]]:
    root.mkdir(parents=True, exist_ok=True)
    with federated_boxes(root, names, resend=None, make_daemon=_daemon) as (boxes, server):
        yield boxes, server


# --- screens -----------------------------------------------------------------------------------------


def _screen_idle(tmux: TmuxServer, pane: str) -> bool:
    out = tmux.tmux("capture-pane", "-p", "-t", pane, ";", "display-message", "-p", "-t", pane,
                    "#{cursor_x} #{cursor_y} #{pane_height}")
    body, _, meta = out.removesuffix("\n").rpartition("\n")
    x, y, height = (int(v) for v in meta.split())
    reading = read_screen(body, "claude", (x, y), height=height)
    return reading.activity is Activity.IDLE and reading.composer is Composer.EMPTY


def _ready(d: DaemonProcess, agent: AgentHandle) -> None:
    """Idle with an empty composer on its screen, then in the daemon's view, then a pause (as the
    one-box delivery section's trials wait)."""
    wait_for(lambda: _screen_idle(d.tmux, agent.pane), 30, f"{agent.name} idle on screen", every=0.02)
    d.wait_ready(agent, timeout=30)
    time.sleep(0.5)


def _received_at(agent: AgentHandle, marker: str, timeout: float = 10.0) -> float:
    import json

    def find() -> float | None:
        if not agent.log.exists():
            return None
        for line in agent.log.read_text().splitlines():
            row = json.loads(line)
            if marker in row.get("prompt", ""):
                return float(row["at"])
        return None

    return float(wait_for(find, timeout, f"{agent.name} to log {marker!r}", every=0.02))


async def _until_final(client: Any, message_id: str, bound: float) -> dict[str, Any]:
    """``get_message`` with a wait, again until the outcome is final or ``bound`` seconds passed."""
    deadline = time.monotonic() + bound
    while True:
        err, got = await call(client, "get_message", message_id=message_id, wait=min(WAIT, max(1.0, deadline - time.monotonic())))
        if err:
            raise RuntimeError(f"get_message {message_id}: {got}")
        if got["outcome"] in FINALS or time.monotonic() >= deadline:
            return dict(got)


async def _approve(client: Any, to_daemon: DaemonProcess, to: str, message_id: str) -> None:
    """A first message, its card on the recipient's box approved for the pair, then delivered."""
    err, sent = await call(client, "send_message", to=to, text="hello", message_id=message_id)
    assert not err and sent["outcome"] == "queued", sent
    card = await anyio.to_thread.run_sync(lambda: to_daemon.wait_card(60))
    await anyio.to_thread.run_sync(lambda: to_daemon.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True}))
    got = await _until_final(client, message_id, 90)
    assert got["outcome"] == "delivered", got


# --- two boxes: confirmed delivery, and idle CPU -----------------------------------------------------


@dataclass
class TwoBoxes:
    cross: list[float] = field(default_factory=list)  # S on A: send_message -> get_message says delivered
    cross_received: list[float] = field(default_factory=list)  # S's call -> R logged the prompt
    local: list[float] = field(default_factory=list)  # L on B, the same
    local_received: list[float] = field(default_factory=list)
    failures: list[tuple[str, int, str]] = field(default_factory=list)
    typed_bytes: int = 0
    idle_window: float = 0.0
    idle: dict[str, float] = field(default_factory=dict)  # name -> CPU s/min over the window
    wakeups: dict[str, float] = field(default_factory=dict)  # name -> context switches/s of its threads
    nats_version: str = ""
    starts: dict[str, float] = field(default_factory=dict)  # message id -> the wall time of its call
    #: (side, "box: action outcome") -> seconds from the call to that audit record, one per trial
    trace: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: [round(x * 1000, 1) for x in v] for k, v in self.__dict__.items()
                               if isinstance(v, list) and k != "failures"}
        out.update(failures=self.failures, typed_bytes=self.typed_bytes, idle_window=self.idle_window,
                   idle=self.idle, wakeups=self.wakeups, nats_version=self.nats_version,
                   trace={f"{side} | {what}": [round(x * 1000, 1) for x in v] for (side, what), v in self.trace.items()})
        return out


def two_boxes(tmp: Path, trials: int, idle_seconds: float) -> TwoBoxes:
    result = TwoBoxes()
    with _boxes(tmp / "fed2", ["laptop", "devbox"]) as (boxes, server):
        a, b = boxes
        result.nats_version = _nats_version(server)
        log("federation: pairing laptop and devbox")
        pair(a, b)
        s = a.daemon.launch("sender")
        lo = b.daemon.launch("local-sender")
        r = b.daemon.launch("recipient", env={"DEMO_BUSY_SECONDS": "0.3"})
        for d, agent in ((a.daemon, s), (b.daemon, lo), (b.daemon, r)):
            d.wait_ready(agent, timeout=60)
        remote = f"{r.address}@devbox"

        async def session() -> None:
            async with mcp_agent(a.daemon.mcp_url, s.token or "") as cs, mcp_agent(b.daemon.mcp_url, lo.token or "") as cl:
                await _approve(cs, b.daemon, remote, "approve-cross")
                await _approve(cl, b.daemon, r.address, "approve-local")
                log(f"federation: both pairs approved; {trials} trials each")
                for n in range(trials):
                    for side, client, to, out, received in (
                        ("cross", cs, remote, result.cross, result.cross_received),
                        ("local", cl, r.address, result.local, result.local_received),
                    ):
                        await anyio.to_thread.run_sync(_ready, b.daemon, r)
                        marker = f"bench {side} {n}: please"
                        text = TEXT.format(n=f"{side} {n}")
                        try:
                            start = time.time()
                            result.starts[f"{side}-{n}"] = start
                            err, sent = await call(client, "send_message", to=to, text=text, message_id=f"{side}-{n}")
                            if err or sent["outcome"] not in ("queued", "delivered"):
                                raise RuntimeError(f"send_message: {sent}")
                            got = await _until_final(client, f"{side}-{n}", 60)
                            if got["outcome"] != "delivered":
                                raise RuntimeError(f"get_message: {got}")
                            out.append(time.time() - start)
                            at = await anyio.to_thread.run_sync(_received_at, r, marker)
                            received.append(at - start)
                            if not result.typed_bytes:
                                typed = next(p for p in r.prompts() if marker in p)
                                result.typed_bytes = len(typed.encode())
                        except Exception as exc:  # noqa: BLE001 - counted and reported, not retried
                            result.failures.append((side, n, f"{type(exc).__name__}: {str(exc)[:300]}"))

        anyio.run(session)
        log(f"federation: across boxes p50 {pct(result.cross, 50) * 1000:.0f} ms, one box p50 "
            f"{pct(result.local, 50) * 1000:.0f} ms; {len(result.failures)} failed")
        _trace(a, b, result)
        _idle(tmp, a, b, server, result, idle_seconds)
    return result


def _trace(a: Box, b: Box, result: TwoBoxes) -> None:
    """Where the time of each trial goes: every audit record on either box naming the trial's message,
    as seconds from the call (both daemons share this machine's clock)."""
    for box in (a, b):
        rows: list[dict[str, Any]] = []
        after = 0
        while True:
            page = list(box.daemon.api("GET", f"/api/audit?limit=1000&after={after}"))
            rows += page
            if len(page) < 1000:
                break
            after = page[-1]["id"]
        for row in rows:
            mid = str(row.get("message_id") or "").split("/")[-1]
            if mid in result.starts:
                side = mid.split("-")[0]
                key = (side, f"{box.name}: {row['action']} {row['outcome']}")
                result.trace.setdefault(key, []).append(float(row["at"]) - result.starts[mid])


def _switches(pid: int) -> int:
    """Context switches (voluntary + not) of the main thread of ``pid`` so far: how often its event loop
    woke (worker threads come and go, and one that ends takes its count with it)."""
    total = 0
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
            total += int(line.split()[1])
    return total


def _nats_version(server: Any) -> str:
    import subprocess

    done = subprocess.run([server.binary, "--version"], capture_output=True, text=True, timeout=10)
    return done.stdout.strip()


def _idle(tmp: Path, a: Box, b: Box, server: Any, result: TwoBoxes, seconds: float) -> None:
    """A (one idle agent), B (two), a daemon that does not federate (one idle agent) and the NATS
    server: CPU over the same window, every message final and every agent idle."""
    with Fleet(tmp, "fed-plain", policy=QUEUED_POLICY) as plain:
        plain.start_daemon()
        plain.launch_many(1, prefix="idle")
        time.sleep(5.0)
        assert a.daemon.proc is not None and b.daemon.proc is not None and server.proc is not None
        pids = {
            "federated (laptop, 1 agent)": (a.daemon.proc.pid, True),
            "federated (devbox, 2 agents)": (b.daemon.proc.pid, True),
            "not federated (1 agent)": (plain.pid, True),
            "nats-server": (server.proc.pid, False),
        }
        log(f"federation: idle CPU over {seconds:.0f} s")
        start = time.monotonic()
        before = {k: cpu_seconds(pid, tree=tree) for k, (pid, tree) in pids.items()}
        switches = {k: _switches(pid) for k, (pid, _) in pids.items()}
        time.sleep(seconds)
        after = {k: cpu_seconds(pid, tree=tree) for k, (pid, tree) in pids.items()}
        result.idle_window = time.monotonic() - start
        result.idle = {k: (after[k] - before[k]) / result.idle_window * 60 for k in pids}
        result.wakeups = {k: (_switches(pid) - switches[k]) / result.idle_window for k, (pid, _) in pids.items()}
        log("federation: idle " + ", ".join(f"{k} {v:.3f} s/min" for k, v in result.idle.items()))


# --- ten boxes: messages per second, every outcome accounted for ------------------------------------


@dataclass
class Ring:
    where: str  # "ten boxes" | "one box"
    messages: int = 0  # admitted (send_message answered queued)
    refused_at_send: int = 0
    wall: float = 0.0  # the first send -> the last final outcome
    outcomes: Counter[str] = field(default_factory=Counter)
    audit_finals: Counter[int] = field(default_factory=Counter)  # final records per admitted message -> messages
    typed: Counter[int] = field(default_factory=Counter)  # times typed per admitted message -> messages
    problems: list[str] = field(default_factory=list)
    cpu_s: float = 0.0  # every daemon's CPU (and nats-server's) over run_s
    run_s: float = 0.0  # the first call -> every sender done waiting (all final, or the bound)
    stuck: list[str] = field(default_factory=list)  # lanes with a message not final: the recipient's side

    @property
    def per_second(self) -> float:
        return self.outcomes.get("delivered", 0) / self.wall if self.wall else 0.0

    def row(self) -> dict[str, Any]:
        return {"where": self.where, "messages": self.messages, "refused_at_send": self.refused_at_send,
                "wall": round(self.wall, 2), "per_second": round(self.per_second, 2), "outcomes": dict(self.outcomes),
                "audit_finals": dict(self.audit_finals), "typed": dict(self.typed), "problems": self.problems,
                "stuck": self.stuck, "run_s": round(self.run_s, 1), "cpu_s": round(self.cpu_s, 2)}


@dataclass
class Lane:
    """One sender: its daemon, its token, and whom it sends to (with the daemon that holds them)."""

    d: DaemonProcess
    sender: AgentHandle
    to: str
    recipient: AgentHandle
    recipient_d: DaemonProcess
    prefix: str


def _ring_run(where: str, lanes: list[Lane], per_sender: int, bound: float, pids: list[int]) -> Ring:
    ring = Ring(where)

    # one lane at a time: on one box, wait_card reads the first open card
    async def approve_seq() -> None:
        for lane in lanes:
            async with mcp_agent(lane.d.mcp_url, lane.sender.token or "") as client:
                await _approve(client, lane.recipient_d, lane.to, f"{lane.prefix}-approve")

    anyio.run(approve_seq)
    for lane in lanes:
        _ready(lane.recipient_d, lane.recipient)
    finals: dict[tuple[int, str], str] = {}
    admitted: list[tuple[int, str]] = []
    last_final = [0.0]

    async def flood() -> None:
        async with anyio.create_task_group() as tg:
            for k, lane in enumerate(lanes):
                async def one(k: int = k, lane: Lane = lane) -> None:
                    async with mcp_agent(lane.d.mcp_url, lane.sender.token or "") as client:
                        mine = []
                        for i in range(per_sender):
                            mid = f"{lane.prefix}-{i}"
                            err, sent = await call(client, "send_message", to=lane.to, text=TEXT.format(n=f"{lane.prefix} {i}"),
                                                   message_id=mid)
                            if err or sent["outcome"] not in ("queued", "delivered"):
                                ring.refused_at_send += 1
                                ring.problems.append(f"{mid}: {sent}")
                                continue
                            mine.append(mid)
                            admitted.append((k, mid))
                        for mid in mine:
                            got = await _until_final(client, mid, max(1.0, deadline - time.monotonic()))
                            finals[(k, mid)] = got["outcome"]
                            if got["outcome"] in FINALS:
                                last_final[0] = max(last_final[0], time.monotonic())
                tg.start_soon(one)

    cpu0 = sum(cpu_seconds(p, tree=True) for p in pids)
    start = time.monotonic()
    deadline = start + bound
    anyio.run(flood)
    ring.cpu_s = sum(cpu_seconds(p, tree=True) for p in pids) - cpu0
    ring.run_s = time.monotonic() - start
    ring.wall = (last_final[0] or time.monotonic()) - start
    ring.messages = len(admitted)
    ring.outcomes = Counter(finals.values())
    # the audit: exactly one final record per admitted message under its sender's actor on its sender's
    # box (send_message, as for a local message), and for a message across boxes at most one of the
    # outbox's own (federation.outbox, actor connectd: docs/federation.md); typed at most once
    audits: dict[int, list[dict[str, Any]]] = {}
    for lane in lanes:
        if id(lane.d) not in audits:
            audits[id(lane.d)] = _final_records(lane.d)
    for k, mid in admitted:
        lane = lanes[k]
        mine = [r for r in audits[id(lane.d)] if str(r.get("message_id") or "").split("/")[-1] == mid
                and r.get("outcome") in FINALS]
        rows = [r for r in mine if r.get("action") == "send_message"]
        outbox = [r for r in mine if r.get("action") == "federation.outbox"]
        ring.audit_finals[len(rows)] += 1
        if len(outbox) > 1:
            ring.problems.append(f"{mid}: {len(outbox)} final outbox records ({[r.get('outcome') for r in outbox]})")
        typed = sum(1 for p in lane.recipient.prompts() if f"bench {lane.prefix} {mid.rsplit('-', 1)[1]}: please" in p)
        ring.typed[typed] += 1
        outcome = finals.get((k, mid), "?")
        if len(rows) != 1:
            ring.problems.append(f"{mid}: {len(rows)} final audit records ({[r.get('outcome') for r in rows]})")
        if typed > 1 or (outcome == "delivered" and typed != 1):
            ring.problems.append(f"{mid}: {outcome}, typed {typed} times")
        if outcome not in FINALS:
            ring.problems.append(f"{mid}: still {outcome} after {bound:.0f} s")
    stuck = sorted({k for k, mid in admitted if finals.get((k, mid)) not in FINALS})
    for k in stuck:  # what the recipient's daemon holds and shows for a lane whose messages did not end
        lane = lanes[k]
        view = lane.recipient_d.agent_view(lane.recipient.pane)
        ring.stuck.append(
            f"lane {lane.prefix} ({lane.sender.name} -> {lane.to}): the recipient's daemon shows its pane "
            f"{view['activity']} with its composer {view['composer']}; its messages there by state: "
            f"{_states(lane.recipient_d, lane.prefix)}; the recipient's last prompt "
            f"{_last_prompt_age(lane.recipient):.0f} s before this look")
    log(f"federation ring ({where}): {ring.messages} admitted, {dict(ring.outcomes)} in {ring.wall:.1f} s "
        f"({ring.per_second:.2f}/s); {len(ring.problems)} problems")
    return ring


def _states(d: DaemonProcess, prefix: str) -> dict[str, int]:
    """The recipient's box's messages of one lane (message ids ``<prefix>-...``) counted by state, from
    its store (read-only)."""
    import sqlite3

    db = sqlite3.connect(f"file:{d.data_dir / 'connect.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT state, count(*) FROM messages WHERE message_id LIKE ? GROUP BY state",
                          (f"{prefix}-%",)).fetchall()
    finally:
        db.close()
    return {str(state): int(n) for state, n in rows}


def _last_prompt_age(agent: AgentHandle) -> float:
    import json

    ats = [float(json.loads(line)["at"]) for line in agent.log.read_text().splitlines()
           if line.strip() and "prompt" in json.loads(line)] if agent.log.exists() else []
    return time.time() - max(ats) if ats else float("nan")


def _final_records(d: DaemonProcess) -> list[dict[str, Any]]:
    """Every audit record with a final outcome, a page of 1,000 at a time (oldest first)."""
    rows: list[dict[str, Any]] = []
    for outcome in sorted(FINALS):
        after = 0
        while True:
            page = list(d.api("GET", f"/api/audit?outcome={outcome}&limit=1000&after={after}"))
            rows += page
            if len(page) < 1000:
                break
            after = page[-1]["id"]
    return rows


def ten_boxes(tmp: Path, boxes_n: int, per_sender: int, bound: float) -> dict[str, Any]:
    names = [f"box{i}" for i in range(boxes_n)]
    out: dict[str, Any] = {"boxes": boxes_n, "per_sender": per_sender}
    with _boxes(tmp / "fed10", names) as (boxes, server):
        log(f"federation: {boxes_n} daemons up; pairing them in a ring")
        for i, box in enumerate(boxes):
            pair(box, boxes[(i + 1) % boxes_n])
        senders, recipients = [], []
        for box in boxes:
            senders.append(box.daemon.launch("sender"))
            recipients.append(box.daemon.launch("recipient", env={"DEMO_BUSY_SECONDS": "0.2"}))
        for box, s, r in zip(boxes, senders, recipients, strict=True):
            box.daemon.wait_ready(s, timeout=90)
            box.daemon.wait_ready(r, timeout=90)
        pids = [b.daemon.proc.pid for b in boxes if b.daemon.proc is not None]
        assert server.proc is not None
        pids.append(server.proc.pid)
        # the baseline first (the same daemons, each delivering within its own box), so that whatever the
        # run across boxes leaves behind cannot weigh on it
        within = [Lane(box.daemon, senders[i], recipients[i].address, recipients[i], box.daemon, f"w{i}")
                  for i, box in enumerate(boxes)]
        out["one_box"] = _ring_run("within each box", within, per_sender, bound, pids)
        across = []
        for i, box in enumerate(boxes):
            j = (i + 1) % boxes_n
            across.append(Lane(box.daemon, senders[i], f"{recipients[j].address}@{names[j]}", recipients[j],
                               boxes[j].daemon, f"x{i}"))
        out["ring"] = _ring_run(f"{boxes_n} boxes", across, per_sender, bound, pids)
    return out
