"""Daemon memory with many panes and a deep queue, and a flood of senders against the limits.

Queued: at the watch benchmark's full fleet (50 idle agents), 10 agents send 100 messages each to the
other 40 (pairs not approved, so every message waits on its card: queued). RSS before and after,
the admission rate, and the daemon's idle CPU while it holds them.

Flood: a fresh daemon with the default rate limits and short card and id lifetimes, 20 sender agents
and 5 recipients. Every sender makes 1,000 ``send_message`` calls as fast as its MCP session allows,
round robin over the recipients, all senders at once. A person thread answers cards as they come:
approve the pair for recipient 0, decline for recipient 1, leave the rest to expire. Then, once
every lifetime has passed:

- admitted per sender never exceeds what the sender and pair rate limits allow in the flood's time;
- ``/api/messages`` holds exactly the admitted messages, each with one final outcome;
- the audit log holds, per message id, exactly ``queued`` + one final outcome for an admitted message
  and exactly one ``refused`` for a refused one;
- every delivered message was typed into its recipient exactly once, and nothing else was.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import anyio

from benchlib.common import AgentHandle, DaemonProcess, Fleet, cpu_seconds, log, pct, rss_mb, wait_for
from tests.support.daemon import mcp_agent

REASON = re.compile(r"refused \((\w+)\)")
FINAL = {"delivered", "declined", "refused", "cancelled", "expired", "unconfirmed"}
TEXT = (
    "flood {s}-{i}: the migration in the billing worker failed again on the replica; can you check "
    "whether your branch touched the invoice schema, and if so rebase on main before the next deploy"
)


@dataclass
class Sends:
    latencies: list[float] = field(default_factory=list)
    started: list[float] = field(default_factory=list)  # monotonic start of each call, same order
    answers: Counter[str] = field(default_factory=Counter)  # queued / refused:<reason> / error
    admitted: dict[str, set[str]] = field(default_factory=dict)  # sender pane -> admitted ids
    refused: dict[str, set[str]] = field(default_factory=dict)
    admitted_at: list[float] = field(default_factory=list)
    wall: float = 0.0
    capped: bool = False

    def p50_of(self, first: bool, count: int) -> float:
        """p50 latency of the first (or last) ``count`` calls by start time."""
        ordered = [lat for _, lat in sorted(zip(self.started, self.latencies, strict=True))]
        return pct(ordered[:count] if first else ordered[-count:], 50)


async def _send_all(
    d: DaemonProcess | SimpleNamespace, jobs: list[tuple[AgentHandle, list[tuple[str, str, str]]]], max_seconds: float = 3600.0
) -> Sends:
    """``jobs``: per sender, its (to, message_id, text) calls, made in order on its own session; every
    sender stops early once ``max_seconds`` have passed (a bound on the run, reported by the caller)."""
    out = Sends()
    async with AsyncExitStack() as stack:
        sessions = [
            (sender, calls, await stack.enter_async_context(mcp_agent(d.mcp_url, sender.token or "")))
            for sender, calls in jobs
        ]

        async def run(sender: AgentHandle, calls: list[tuple[str, str, str]], client: Any) -> None:
            admitted = out.admitted.setdefault(sender.pane, set())
            refused = out.refused.setdefault(sender.pane, set())
            for to, message_id, text in calls:
                if time.monotonic() - begin > max_seconds:
                    out.capped = True
                    return
                start = time.perf_counter()
                result = await client.call_tool("send_message", {"to": to, "text": text, "message_id": message_id})
                out.latencies.append(time.perf_counter() - start)
                out.started.append(start)
                if result.is_error:
                    said = " ".join(getattr(c, "text", "") for c in result.content)
                    found = REASON.search(said)
                    reason = found[1] if found else "error: " + said[:80]
                    out.answers[f"refused:{reason}"] += 1
                    refused.add(message_id)
                else:
                    outcome = result.structured_content["outcome"]
                    out.answers[outcome] += 1
                    admitted.add(message_id)
                    out.admitted_at.append(time.time())

        begin = time.monotonic()
        async with anyio.create_task_group() as tg:
            for sender, calls, client in sessions:
                tg.start_soon(run, sender, calls, client)
        out.wall = time.monotonic() - begin
    return out


class RssSampler:
    """VmRSS of one process every ``every`` seconds, in a thread, until stopped."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.pid, self.every = pid, every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(rss_mb(self.pid))
            self._stop.wait(self.every)


# --- queued ------------------------------------------------------------------------------------------


QUEUED_POLICY = "[limits]\nsender_per_window = 1000\npair_per_window = 1000\n"


def queued(
    fleet: Fleet, agents: list[AgentHandle], result: dict[str, Any], *, messages: int = 1000, senders: int = 10,
    window: float = 20.0,
) -> None:
    d = fleet.d
    time.sleep(2.0)
    result["rss_panes_mb"] = rss_mb(fleet.pid)
    result["panes"] = len(agents)
    result["senders"] = senders
    who, to = agents[:senders], agents[senders:]
    per = messages // senders
    jobs = [
        (s, [(to[(k * per + i) % len(to)].address, f"q-{k}-{i}", TEXT.format(s=k, i=i)) for i in range(per)])
        for k, s in enumerate(who)
    ]
    from benchlib.mcp_rate import NoopServer, pinned

    with RssSampler(fleet.pid) as sampler, pinned(fleet.pid):
        sends = anyio.run(_send_all, d, jobs)
    # The baseline in the same run: the same calls on the same number of sessions to the bare SDK
    # serving a no-op ``send_message`` (its own process, as connectd is).
    with NoopServer() as noop, pinned(noop.proc.pid):
        bare = anyio.run(_send_all, SimpleNamespace(mcp_url=noop.url), jobs)
    result["bare_per_s"] = sum(bare.answers.values()) / bare.wall
    result["bare_p50_ms"] = pct(bare.latencies, 50) * 1000
    result["bare_p99_ms"] = pct(bare.latencies, 99) * 1000
    queued_now = sum(1 for m in d.api("GET", "/api/messages?limit=1000") if m["outcome"] == "queued")
    result["queued"] = queued_now
    result["answers"] = dict(sends.answers)
    result["admission_per_s"] = sum(sends.answers.values()) / sends.wall
    result["send_p50_ms"] = pct(sends.latencies, 50) * 1000
    result["send_p99_ms"] = pct(sends.latencies, 99) * 1000
    time.sleep(3.0)
    result["rss_queued_mb"] = rss_mb(fleet.pid)
    result["rss_queued_peak_mb"] = max(sampler.samples + [result["rss_queued_mb"]])
    tenth = max(1, len(sends.latencies) // 10)
    result["send_p50_first_ms"] = sends.p50_of(True, tenth) * 1000
    result["send_p50_last_ms"] = sends.p50_of(False, tenth) * 1000
    result["tenth"] = tenth
    result["cpu_queued_s_per_min"] = _idle_cpu(fleet.pid, window)
    # The person turns the senders off: every queued message is cancelled and its card closed. Both
    # stay in the daemon's memory for the rest of their id's hour (the default id_ttl).
    start = time.monotonic()
    for sender in who:
        d.api("POST", "/api/revoke", {"pane": sender.pane})
    result["revoke_s"] = time.monotonic() - start
    rows = d.api("GET", "/api/messages?limit=1000")
    result["cancelled"] = sum(1 for m in rows if m["outcome"] == "cancelled")
    time.sleep(2.0)
    result["cpu_closed_s_per_min"] = _idle_cpu(fleet.pid, window)
    result["rss_closed_mb"] = rss_mb(fleet.pid)
    log(
        f"queued {queued_now} messages ({result['admission_per_s']:.0f} calls/s): RSS {result['rss_panes_mb']:.1f} -> "
        f"{result['rss_queued_mb']:.1f} MiB, CPU {result['cpu_queued_s_per_min']:.2f} s/min; "
        f"{result['cancelled']} cancelled: CPU {result['cpu_closed_s_per_min']:.2f} s/min"
    )


def _idle_cpu(pid: int, seconds: float) -> float:
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0) * 60


# --- flood -------------------------------------------------------------------------------------------


def _person(d: DaemonProcess, approve: str, decline: str, stop: threading.Event, tally: Counter[str]) -> None:
    """Answers cards as they arrive: approve the pair to ``approve``, decline to ``decline``."""
    import httpx2

    with httpx2.Client(base_url=d.base_url, headers={"Authorization": f"Bearer {d.owner_token}"}, timeout=30) as http:
        while not stop.is_set():
            for card in http.get("/api/cards").json():
                if card["recipient_pane"] == approve:
                    r = http.post(f"/api/cards/{card['id']}/approve", json={"pair": True})
                    tally[f"approve:{r.status_code}"] += 1
                elif card["recipient_pane"] == decline:
                    r = http.post(f"/api/cards/{card['id']}/decline", json={})
                    tally[f"decline:{r.status_code}"] += 1
            view = next((a for a in http.get("/api/agents").json() if a["pane"] == approve), None)
            if view is not None:  # how often the approved recipient sat ready for a message
                tally["approved_samples"] += 1
                tally["approved_idle"] += view["activity"] == "idle" and view["composer"] == "empty"
            stop.wait(0.5)


def own_pace(fleet: Fleet, agent: AgentHandle, messages: int = 20) -> float:
    """The stand-in's own pace, by hand: paste + Enter as soon as tmux itself shows the pane idle with an
    empty composer (polled every 10 ms), and each submission seen on screen; submissions a second from the
    first to the last. The flood's approved recipient cannot take messages faster than this."""
    from benchlib.delivery import _floor, _screen_idle

    seen: list[float] = []
    for n in range(messages):
        wait_for(lambda: _screen_idle(fleet, agent.pane), 10, f"{agent.name} idle on screen", every=0.01)
        marker = f"pace {n}: please"
        start = time.monotonic()
        seen.append(start + _floor(fleet, agent.pane, f"[pace] {marker} check the replica", marker))
    return (len(seen) - 1) / (seen[-1] - seen[0])


def _paged_audit(d: DaemonProcess, actor: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after = 0
    while True:
        page = d.api("GET", "/api/audit?" + urlencode({"actor": actor, "after": after, "limit": 1000, "order": "oldest"}))
        rows += page
        if len(page) < 1000:
            return rows
        after = page[-1]["id"]


def flood(
    tmp: Path,
    *,
    senders: int = 20,
    per_sender: int = 1000,
    recipients: int = 5,
    card_ttl: float = 20.0,
    id_ttl: float = 30.0,
    max_seconds: float = 360.0,
) -> dict[str, Any]:
    policy = f"[limits]\ncard_ttl = {card_ttl}\nid_ttl = {id_ttl}\n"
    result: dict[str, Any] = {"senders": senders, "per_sender": per_sender, "recipients": recipients,
                              "card_ttl": card_ttl, "id_ttl": id_ttl}
    with Fleet(tmp, "flood", policy=policy) as fleet:
        fleet.start_daemon()
        d = fleet.d
        from connectcore.delivery import DEFAULT_LIMITS as limits

        result["limits"] = {"sender_per_window": limits.sender_per_window, "pair_per_window": limits.pair_per_window,
                            "rate_window": limits.rate_window}
        log(f"flood: launching {senders} senders and {recipients} recipients")
        who = fleet.launch_many(senders, prefix="sender")
        to = fleet.launch_many(recipients, prefix="recipient", env={"DEMO_BUSY_SECONDS": "0.2"})
        [pace] = fleet.launch_many(1, prefix="pace", connect="off", env={"DEMO_BUSY_SECONDS": "0.2"})
        time.sleep(2.0)
        result["own_pace_per_s"] = own_pace(fleet, pace)  # the same stand-in, typed by hand, unloaded
        log(f"flood: the stand-in's own pace {result['own_pace_per_s']:.2f} messages/s")
        result["rss_before_mb"] = rss_mb(fleet.pid)
        jobs = [
            (s, [(to[i % recipients].address, f"f-{k}-{i}", TEXT.format(s=k, i=i)) for i in range(per_sender)])
            for k, s in enumerate(who)
        ]
        stop, tally = threading.Event(), Counter[str]()
        person = threading.Thread(target=_person, args=(d, to[0].pane, to[1].pane, stop, tally), daemon=True)
        person.start()
        cpu0 = cpu_seconds(fleet.pid)
        try:
            with RssSampler(fleet.pid) as sampler:
                sends = anyio.run(_send_all, d, jobs, max_seconds)
            cpu = cpu_seconds(fleet.pid) - cpu0
            result["cpu_during_s_per_min"] = cpu / sends.wall * 60
            result["cpu_ms_per_call"] = cpu / max(1, len(sends.latencies)) * 1000
            result["capped"] = sends.capped
            result["max_seconds"] = max_seconds
            result["load_during"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
            result["rss_peak_mb"] = max(sampler.samples)
            last_admit = max(sends.admitted_at) if sends.admitted_at else time.time()
            log(f"flood: {sum(sends.answers.values())} calls in {sends.wall:.1f} s {dict(sends.answers)}; waiting for lifetimes")
            wait_until = last_admit + max(card_ttl, id_ttl) + 3
            while time.time() < wait_until:
                time.sleep(0.5)
        finally:
            stop.set()
            person.join(10)
        result.update(_check(fleet, who, to, sends, limits))
        result["rss_after_mb"] = rss_mb(fleet.pid)
        result["answers"] = dict(sends.answers)
        result["approved_idle_share"] = tally.pop("approved_idle", 0) / max(1, tally.pop("approved_samples", 0))
        result["cards"] = dict(tally)
        result["wall"] = sends.wall
        result["calls_per_s"] = sum(sends.answers.values()) / sends.wall
        result["send_p50_ms"] = pct(sends.latencies, 50) * 1000
        result["send_p99_ms"] = pct(sends.latencies, 99) * 1000
    log(f"flood: {result}")
    return result


def _take_rate(rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    """How fast a recipient took its messages: the time some message to it waited (admitted, not yet
    final; the rate limits admit in bursts, so it has nothing to take between a burst's expiry and the
    next window), deliveries per second of that time, and the longest time between two deliveries
    while one message waited all through it (a recipient left unarmed)."""
    spans = sorted((m["created_at"], m["final_at"]) for m in rows if m["final_at"] is not None)
    waiting, start, end = 0.0, None, None
    for a, b in spans:
        if end is None or a > end:
            waiting += 0.0 if end is None or start is None else end - start
            start, end = a, b
        else:
            end = max(end, b)
    waiting += 0.0 if end is None or start is None else end - start
    times = sorted(m["final_at"] for m in rows if m["outcome"] == "delivered")
    longest = max(
        (b - a for a, b in zip(times, times[1:], strict=False) if any(c <= a and f >= b for c, f in spans)),
        default=0.0,
    )
    return waiting, (len(times) / waiting if waiting else 0.0), longest


def _check(fleet: Fleet, who: list[AgentHandle], to: list[AgentHandle], sends: Sends, limits: Any) -> dict[str, Any]:
    d = fleet.d
    # Every lifetime has passed: wait (bounded) for anything still typing to finish.
    def settled() -> list[dict[str, Any]] | None:
        rows = [m for s in who for m in d.api("GET", "/api/messages?" + urlencode({"pane": s.pane, "limit": 1000}))]
        return rows if all(m["outcome"] in FINAL for m in rows) else None

    rows = wait_for(settled, 60, "every admitted message final", every=1.0)
    admitted = sum(len(v) for v in sends.admitted.values())
    windows = max(1, math.ceil(sends.wall / limits.rate_window))  # any 60 s holds at most the limit
    sender_bound = limits.sender_per_window * windows
    pair_bound = limits.pair_per_window * windows
    per_sender = {pane: len(ids) for pane, ids in sends.admitted.items()}
    actor_of = {a["pane"]: a["actor"] for a in d.api("GET", "/api/agents")}
    problems: list[str] = []
    by_key: Counter[tuple[str, str]] = Counter()
    outcomes: Counter[str] = Counter()
    pair_counts: Counter[tuple[str, str]] = Counter()
    for m in rows:
        by_key[(m["from"], m["message_id"])] += 1
        outcomes[m["outcome"]] += 1
        pair_counts[(m["from"], m["recipient_pane"])] += 1
    if len(rows) != admitted:
        problems.append(f"{len(rows)} message rows for {admitted} admitted calls")
    if any(n != 1 for n in by_key.values()):
        problems.append("a message id has more than one row")
    if max(per_sender.values(), default=0) > sender_bound:
        problems.append(f"a sender got {max(per_sender.values())} admitted (bound {sender_bound})")
    if max(pair_counts.values(), default=0) > pair_bound:
        problems.append(f"a pair got {max(pair_counts.values())} admitted (bound {pair_bound})")
    audit_ok = 0
    for sender in who:
        records: dict[str, list[str]] = {}
        for row in _paged_audit(d, actor_of[sender.pane]):
            if row["action"] == "send_message":
                records.setdefault(row["message_id"], []).append(row["outcome"])
        for message_id in sends.admitted[sender.pane]:
            trail = records.get(message_id, [])
            if len(trail) == 2 and trail[0] == "queued" and trail[1] in FINAL:
                audit_ok += 1
            else:
                problems.append(f"audit trail of admitted {message_id}: {trail}")
        for message_id in sends.refused[sender.pane]:
            if records.get(message_id) != ["refused"]:
                problems.append(f"audit trail of refused {message_id}: {records.get(message_id)}")
    delivered_refs = Counter(m["ref"] for m in rows if m["outcome"] == "delivered")
    typed: Counter[str] = Counter()
    for agent in to:
        for prompt in agent.prompts():
            if prompt.startswith("[connect] message "):
                typed[prompt.split()[2]] += 1
    if any(typed[ref] != 1 for ref in delivered_refs):
        problems.append("a delivered message was not typed exactly once")
    unconfirmed = {m["ref"] for m in rows if m["outcome"] == "unconfirmed"}
    extra = {ref for ref in typed if ref not in delivered_refs and ref not in unconfirmed}
    if extra:
        problems.append(f"{len(extra)} typed messages are not delivered or unconfirmed")
    if any(n > 1 for n in typed.values()):
        problems.append("a message was typed twice")
    approved = Counter(m["outcome"] for m in rows if m["recipient_pane"] == to[0].pane)
    waiting_s, per_s, longest = _take_rate([m for m in rows if m["recipient_pane"] == to[0].pane])
    return {
        "approved_recipient_outcomes": dict(approved),
        "approved_waiting_s": waiting_s,
        "approved_delivered_per_s": per_s,
        "approved_longest_gap_s": longest,
        "admitted": admitted,
        "refused": sum(len(v) for v in sends.refused.values()),
        "admitted_per_sender_max": max(per_sender.values(), default=0),
        "sender_bound": sender_bound,
        "pair_max": max(pair_counts.values(), default=0),
        "pair_bound": pair_bound,
        "outcomes": dict(outcomes),
        "audit_trails_ok": audit_ok,
        "typed": sum(typed.values()),
        "problems": problems[:20],
        "problem_count": len(problems),
    }
