"""Soak: P panes, A connected stand-in agents exchanging messages for M minutes (issue 22 item 7).

One private tmux server, a real ``connectd serve``; A stand-in agents (``demo_agent``, Collaborate)
launched through the daemon, plus P-A plain panes (``sleep infinity`` windows), so the daemon watches
P panes. The agents form a ring (agent i sends to agent i+1); each pair's first card is approved with
``pair: true``. For M minutes every agent sends one message per ``period`` seconds with a unique id;
the daemon's RSS (VmRSS) and CPU seconds (its process tree) are sampled every ``sample`` seconds.
At the end every sent message's outcome is read with ``get_message`` (bounded drain wait) and each
delivered message must appear exactly once in its recipient's log.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchlib.common import AgentHandle, Fleet, cpu_seconds, log, rss_mb
from tests.support.daemon import call, mcp_agent

BEGIN, END = "<!-- soak:begin -->", "<!-- soak:end -->"
FINAL = {"delivered", "expired", "refused", "failed", "cancelled", "undeliverable"}
FLAT_PERCENT = 20.0  # flat: the last window's RSS within this of the first window's (after warm-up)


def policy(limits_per_minute: int, id_ttl: float | None = None) -> str:
    """A policy whose rate limits admit the soak's rate (the defaults are 30 per sender, 10 per pair)."""
    return (
        "[limits]\n"
        "hop_limit = 1000000\n"  # a ring of untied messages is one conversation per pair: no hop card
        f"sender_per_window = {limits_per_minute}\n"
        f"pair_per_window = {limits_per_minute}\n"
        "live_ids_per_principal = 100000\n"
        + (f"id_ttl = {id_ttl}\n" if id_ttl is not None else "")
    )


@dataclass
class Soak:
    minutes: float
    panes: int
    agents: int
    period: float
    id_ttl: float | None = None  # the id's hour shortened, to show RSS level off once ids are released
    sent: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> (sender index, first outcome)
    refused_at_send: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    final: dict[str, str] = field(default_factory=dict)  # id -> final outcome read at the end
    not_final: list[str] = field(default_factory=list)
    typed_counts: Counter[int] = field(default_factory=Counter)  # times typed -> number of delivered messages
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (t, rss MB, cpu s)
    seconds: float = 0.0
    load: str = ""


async def _run(fleet: Fleet, handles: list[AgentHandle], soak: Soak, sample: float, drain: float) -> None:
    d, pid = fleet.d, fleet.pid
    n = len(handles)
    async with anyio.create_task_group() as tg_clients:
        clients: list[Any] = [None] * n
        ready = anyio.Event()
        stop = anyio.Event()

        async def hold(i: int) -> None:
            async with mcp_agent(d.mcp_url, handles[i].token or "") as client:
                clients[i] = client
                if all(c is not None for c in clients):
                    ready.set()
                await stop.wait()

        for i in range(n):
            tg_clients.start_soon(hold, i)
        await ready.wait()
        # Approve each pair once: the first message of each pair makes a card.
        for i in range(n):
            to = handles[(i + 1) % n].address
            mid = f"soak-{i}-approve"
            err, sent = await call(clients[i], "send_message", to=to, text=f"soak hello from {i}", message_id=mid)
            assert not err, sent
            soak.sent[mid] = (i, sent["outcome"])
        for _ in range(200):
            cards = await anyio.to_thread.run_sync(d.cards)
            for card in cards:
                await anyio.to_thread.run_sync(lambda c=card: d.api("POST", f"/api/cards/{c['id']}/approve", {"pair": True}))
            approved = sum(1 for m in soak.sent if m.endswith("-approve"))
            if not cards and approved == n:
                break
            await anyio.sleep(0.5)
        log(f"soak: {n} pairs approved; sending for {soak.minutes} min")
        start = time.monotonic()
        end = start + soak.minutes * 60
        soak.samples.append((0.0, rss_mb(pid), cpu_seconds(pid)))

        async def sender(i: int) -> None:
            to = handles[(i + 1) % n].address
            k = 0
            await anyio.sleep(soak.period * i / n)  # spread the senders evenly over one period
            while time.monotonic() < end:
                mid = f"soak-{i}-{k}"
                err, sent = await call(clients[i], "send_message", to=to, text=f"soak {mid}: status please", message_id=mid)
                if err:
                    soak.refused_at_send[str(sent)[:80]] += 1
                else:
                    soak.sent[mid] = (i, sent["outcome"])
                k += 1
                await anyio.sleep(soak.period)

        async def sampler() -> None:
            while time.monotonic() < end:
                await anyio.sleep(min(sample, max(0.0, end - time.monotonic())))
                t = time.monotonic() - start
                soak.samples.append((t, rss_mb(pid), cpu_seconds(pid)))
                log(f"soak: t={t:.0f}s rss={soak.samples[-1][1]:.1f} MB cpu={soak.samples[-1][2]:.1f} s sent={len(soak.sent)}")

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(sender, i)
            tg.start_soon(sampler)
        soak.seconds = time.monotonic() - start
        soak.load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        # The drain: every message's final outcome, waiting at most `drain` seconds in all.
        drain_end = time.monotonic() + drain
        for mid, (i, _) in sorted(soak.sent.items()):
            wait = max(0.0, min(30.0, drain_end - time.monotonic()))
            err, got = await call(clients[i], "get_message", message_id=mid, wait=wait)
            outcome = "error" if err else str(got["outcome"])
            soak.outcomes[outcome] += 1
            soak.final[mid] = outcome
            if outcome not in FINAL:
                soak.not_final.append(f"{mid}: {outcome}")
        soak.samples.append((time.monotonic() - start, rss_mb(pid), cpu_seconds(pid)))
        prompts = {i: "\n".join(h.prompts()) for i, h in enumerate(handles)}
        for mid, (i, _) in soak.sent.items():
            if soak.final.get(mid) == "delivered" and not mid.endswith("-approve"):
                soak.typed_counts[prompts[(i + 1) % n].count(f"soak {mid}:")] += 1
        stop.set()


def run(tmp: Path, *, minutes: float, panes: int, agents: int, period: float = 10.0, busy: float = 0.2,
        sample: float = 30.0, drain: float = 120.0, id_ttl: float | None = None) -> Soak:
    soak = Soak(minutes, panes, agents, period, id_ttl)
    per_minute = int(60 / period) * 2 + 10
    with Fleet(tmp, "soak", policy=policy(per_minute, id_ttl), width=200, height=50) as fleet:
        for _ in range(panes - agents):
            fleet.tmux.tmux("new-window", "-d", "-t", "main", "sleep infinity")
        fleet.start_daemon()
        handles = fleet.launch_many(agents, env={"DEMO_BUSY_SECONDS": str(busy)})
        log(f"soak: {panes} panes, {agents} agents ready")
        anyio.run(_run, fleet, handles, soak, sample, drain)
    return soak


def report(s: Soak, *, label: str = "") -> str:
    rate = sum(1 for m in s.sent if not m.endswith("-approve")) / s.seconds if s.seconds else 0.0
    rows = ["| t (s) | RSS (MB) | CPU s/min in the window before |", "|---:|---:|---:|"]
    windows: list[float] = []
    for (t0, _, c0), (t1, r1, c1) in zip(s.samples, s.samples[1:], strict=False):
        per_min = (c1 - c0) / max(t1 - t0, 1e-9) * 60
        windows.append(per_min)
        rows.append(f"| {t1:.0f} | {r1:.1f} | {per_min:.2f} |")
    rows.insert(2, f"| 0 | {s.samples[0][1]:.1f} | |")
    # Warm-up: the first window; flat compares the second sample with the last one taken before the drain.
    rss = [r for _, r, _ in s.samples]
    base, last = (rss[1], rss[-2]) if len(rss) >= 4 else (rss[0], rss[-1])
    ratio = last / base if base else 0.0
    cpu_ratio = windows[-2] / windows[0] if len(windows) >= 2 and windows[0] else 0.0
    flat = abs(ratio - 1) * 100 <= FLAT_PERCENT
    exactly_once = not s.not_final and set(s.typed_counts) <= {1}
    title = f"Soak: {s.panes} panes, {s.agents} agents, {s.minutes:g} minutes"
    ttl = f" --id-ttl {s.id_ttl:g}" if s.id_ttl is not None else ""
    if s.id_ttl is not None:
        title += f", ids held {s.id_ttl:g} s"
    lines = [BEGIN, f"## {title}", ""]
    if label:
        lines += [f"**{label}**", ""]
    lines += [
        f"Run: `scripts/soak.py --minutes {s.minutes:g} --panes {s.panes} --agents {s.agents}{ttl}` (`make soak`). "
        f"Ring of {s.agents} stand-ins (turn 0.2 s), each sending one message every {s.period:g} s; "
        f"policy for the run: sender_per_window and pair_per_window raised to {int(60 / s.period) * 2 + 10} per minute "
        "(defaults 30 and 10), live_ids_per_principal 100000, hop_limit 1000000 (each pair's messages are one conversation, so the default 4 would card the fifth)"
        + (f", id_ttl {s.id_ttl:g} s (default 3600: the hub holds a final message until its id's hour ends)" if s.id_ttl is not None else "")
        + ".",
        "",
        f"* messages sent: {len(s.sent)} ({rate:.2f} messages/s over {s.seconds:.0f} s); refused at send: "
        f"{sum(s.refused_at_send.values())} {dict(s.refused_at_send) or ''}",
        f"* outcomes: {', '.join(f'{k} {v}' for k, v in sorted(s.outcomes.items()))}",
        f"* not final after the drain: {len(s.not_final)} {s.not_final[:5] if s.not_final else ''}",
        f"* times each message appears in its recipient's log: {dict(sorted(s.typed_counts.items()))} "
        f"(all but the {s.agents} first messages, which opened the cards and are counted in outcomes only)",
        f"* load average at the end of sending: {s.load}",
        "",
        *rows,
        "",
        f"RSS after warm-up (t={s.samples[1][0]:.0f} s) {base:.1f} MB, last before the drain {last:.1f} MB: ratio {ratio:.2f}. "
        f"CPU s/min first window {windows[0] if windows else 0:.2f}, last sending window "
        f"{windows[-2] if len(windows) >= 2 else 0:.2f}: ratio {cpu_ratio:.2f}.",
        "",
        f"Verdict: every message exactly one final outcome: {'yes' if exactly_once else 'NO'}; "
        f"RSS flat (last within {FLAT_PERCENT:g}% of the first after warm-up): {'yes' if flat else 'NO'}.",
        END,
    ]
    return "\n".join(lines) + "\n"


def splice(doc: str, block: str) -> str:
    """``doc`` with its soak block replaced by ``block`` (appended when it has none)."""
    if BEGIN in doc and END in doc:
        head, _, rest = doc.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + block.rstrip("\n") + tail
    return doc.rstrip("\n") + "\n\n" + block


def kept(old: str) -> str:
    """The soak block of an old report ('' if none), for bench.py to carry into the new one."""
    if BEGIN in old and END in old:
        return BEGIN + old.partition(BEGIN)[2].partition(END)[0] + END + "\n"
    return ""
