"""Confirmed delivery to an idle pane of the pinned real Claude Code and Codex (issue 12).

For each harness: the live rig (:class:`tests.support.live.LiveFleet`: the scripted model server, a
private tmux server, a real ``connectd serve`` subprocess, private HOMEs) with the real binary as
recipient B, launched through connectd, its model answering every prompt with a short reply so it
is idle again at once. The sender A is the stand-in agent (``connectd.cli.demo_agent``) launched through
the same daemon, whose token the bench uses as a direct MCP client (as the stand-in section does);
the pair is approved once beforehand.

connectd: ``send_message`` to B, then ``get_message`` with a wait; the figure is the wall time from
the call to ``delivered``, and to the moment the model server received the prompt.

Floor: the same bytes (the provenance line and the text connectd typed, its marker changed) into the
same pane straight through tmux from this process: one ``load-buffer`` + ``paste-buffer -p -d``,
``send-keys Enter`` at once, then ``capture-pane`` every 10 ms until the screen shows it submitted
(busy, or the text shown with the composer empty again: the stand-in floor's rule); "received" is
when the model server got it.

Trials alternate (connectd, floor, ...) on the same pane, each after B is idle with an empty
composer on its screen and in the daemon's view. Every wait is bounded; a trial that fails is
counted and reported with its reason, not retried; a harness that is not installed is reported.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchlib.common import log, pct, wait_for
from benchlib.memory import QUEUED_POLICY
from connectcore.screen import Activity, Composer, read_screen
from connectd.cli.demo_agent import install_wrapper
from tests.support import harnesses as H
from tests.support.daemon import call, mcp_agent
from tests.support.live import Agent, LiveFleet
from tests.support.model_server import Turn

HARNESSES = ("claude", "codex")
TEXT = "bench {n}: please reply with the build status of the parser branch when you are done"
REPLY = "Noted."
FLOOR_TIMEOUT = 10.0
READY_TIMEOUT = 30.0
WAIT = 20  # get_message's wait, seconds


@dataclass
class RealDelivery:
    harness: str
    release: str
    connectd: list[float] = field(default_factory=list)  # send_message -> get_message says delivered
    connectd_received: list[float] = field(default_factory=list)  # send_message -> the model server got it
    floor: list[float] = field(default_factory=list)  # paste -> seen submitted
    floor_received: list[float] = field(default_factory=list)
    typed_bytes: int = 0
    planned: int = 0
    failures: list[tuple[str, int, str]] = field(default_factory=list)  # ("connectd" | "floor", trial, why)
    slow: list[tuple[int, float]] = field(default_factory=list)  # (trial, seconds): connectd trials over 1 s
    skipped: str = ""  # why the harness was not measured at all
    started_s: float = 0.0  # launch to idle, for the notes

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: [round(x * 1000, 1) for x in v] for k, v in self.__dict__.items()
                               if isinstance(v, list) and k not in ("failures", "slow")}
        out.update(harness=self.harness, release=self.release, typed_bytes=self.typed_bytes,
                   planned=self.planned, failures=self.failures, slow=self.slow, skipped=self.skipped)
        return out


def failures_text(failures: list[tuple[str, int, str]]) -> str:
    """The failed trials grouped by side and reason: "connectd 9, 10 (2): why; floor 3 (1): why"."""
    groups: dict[tuple[str, str], list[int]] = {}
    for side, n, why in failures:
        groups.setdefault((side, why), []).append(n)
    return "; ".join(f"{side} {', '.join(map(str, ns))} ({len(ns)}): {why}" for (side, why), ns in groups.items())


def missing() -> list[str]:
    """The pinned harnesses whose binaries are not installed under .cache/harnesses."""
    return [f"{name} {H.version(name)}" for name in HARNESSES if not H.binary(name).exists()]


def measure_all(tmp: Path, trials: int, *, budget: float) -> list[RealDelivery]:
    """Each pinned harness in turn (``budget``: seconds of trials each, after its start)."""
    out = []
    for name in HARNESSES:
        result = RealDelivery(name, H.version(name), planned=trials)
        if not H.binary(name).exists():
            result.skipped = f"{name} {H.version(name)} is not installed (`make harnesses` installs it)"
            log(f"delivery-real: {result.skipped}")
        else:
            try:
                _measure(tmp / f"real-{name}", result, trials, budget)
            except Exception as exc:  # noqa: BLE001 - one harness failing leaves the other's figures
                result.skipped = result.skipped or f"{type(exc).__name__}: {str(exc)[:600]}"
                log(f"delivery-real {name}: {result.skipped}")
        out.append(result)
    return out


def _measure(root: Path, result: RealDelivery, trials: int, budget: float) -> None:
    wrapper = install_wrapper(root / "bin")
    fleet = LiveFleet(root, launchers={"demo": {"harness": "claude", "argv": [str(wrapper)], "exit_command": "/exit"}})
    # the limits out of the way (a sender's 10 messages a minute to one pair would refuse the trials)
    (fleet.data_dir / "policy.toml").write_text(QUEUED_POLICY)
    try:
        fleet.start(install=False)  # a harness not installed is reported, not installed inside the bench
        b = fleet.prepare("b", result.harness)
        began = time.monotonic()
        fleet.launch(b, "collaborate")
        a_log = root / "sender.jsonl"
        a = fleet.api("POST", "/api/launch", {
            "launcher": "demo", "connect": "collaborate", "cwd": str(fleet.work),
            "env": {"DEMO_AGENT_NAME": "sender", "DEMO_AGENT_LOG": str(a_log), "DEMO_AGENT_REVEAL_TOKEN": "1"},
        })
        token = wait_for(lambda: _token(a_log), 15, "the sender's token", every=0.05)
        wait_for(lambda: _ready(fleet, b), 120, f"{result.harness} idle with an empty composer", every=0.1)
        result.started_s = time.monotonic() - began
        log(f"delivery-real {result.harness}: B idle {result.started_s:.1f} s after launch")
        anyio.run(_session, fleet, b, a["pane"], token, result, trials, budget)
    finally:
        fleet.close()
    c, f = result.connectd, result.floor
    log(f"delivery-real {result.harness}: connectd p50 {pct(c, 50) * 1000:.0f} ms "
        f"(received {pct(result.connectd_received, 50) * 1000:.0f} ms), floor p50 {pct(f, 50) * 1000:.0f} ms; "
        f"{len(c)}+{len(f)} of {trials}+{trials} trials, {len(result.failures)} failed")


def _token(path: Path) -> str | None:
    import json

    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[0]).get("token") if lines and lines[0].endswith("}") else None


async def _session(fleet: LiveFleet, b: Agent, a_pane: str, token: str, result: RealDelivery, trials: int,
                   budget: float) -> None:
    async with mcp_agent(fleet.mcp_url, token) as client:
        # Approve the pair once (the card of a first message), then wait until that one landed.
        fleet.script(b, [Turn.reply(REPLY)])
        err, sent = await call(client, "send_message", to=b.address, text="hello", message_id="bench-approve")
        assert not err, sent
        card = await anyio.to_thread.run_sync(
            lambda: wait_for(lambda: next(iter(fleet.cards()), None), 15, "the consent card"))
        await anyio.to_thread.run_sync(lambda: fleet.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True}))
        err, got = await call(client, "get_message", message_id="bench-approve", wait=WAIT)
        assert not err and got["outcome"] == "delivered", got
        deadline = time.monotonic() + budget
        for n in range(trials):
            if time.monotonic() > deadline:
                result.failures += [(side, k, f"not run, the {budget:.0f} s budget was spent")
                                    for k in range(n, trials) for side in ("connectd", "floor")]
                return
            if not await anyio.to_thread.run_sync(_settled, fleet, b):
                result.failures.append(("connectd", n, f"B was not idle with an empty composer within {READY_TIMEOUT:.0f} s; the trials stopped"))
                return
            marker = f"bench {n}: please"
            typed = ""
            try:
                mark = len(fleet.model.requests)
                fleet.script(b, [Turn.reply(REPLY)])
                start = time.time()
                err, sent = await call(client, "send_message", to=b.address, text=TEXT.format(n=n),
                                       message_id=f"bench-{n}")
                if err or sent["outcome"] not in ("queued", "delivered"):
                    raise RuntimeError(f"send_message: {sent}")
                err, got = await call(client, "get_message", message_id=f"bench-{n}", wait=WAIT)
                if err or got["outcome"] != "delivered":
                    raise RuntimeError(f"get_message: {got}")
                elapsed = time.time() - start
                at, typed = await anyio.to_thread.run_sync(_received, fleet, b, mark, marker)
                result.connectd.append(elapsed)
                if elapsed > 1.0:
                    result.slow.append((n, elapsed))
                result.connectd_received.append(at - start)
            except Exception as exc:  # noqa: BLE001 - counted and reported, not retried
                result.failures.append(("connectd", n, f"{type(exc).__name__}: {str(exc)[:300]}"))
            if not await anyio.to_thread.run_sync(_settled, fleet, b):
                result.failures.append(("floor", n, f"B was not idle with an empty composer within {READY_TIMEOUT:.0f} s; the trials stopped"))
                return
            if not typed:
                typed = f"[connect] message ref-0 from agent:claude:bench (pane {a_pane}).\n{TEXT.format(n=n)}"
            result.typed_bytes = result.typed_bytes or len(typed.encode())
            floor_marker = f"floor {n}: please"
            floor_text = typed.replace(marker, floor_marker).replace("[connect]", "[floor]")
            try:
                mark = len(fleet.model.requests)
                fleet.script(b, [Turn.reply(REPLY)])
                t0, elapsed = await anyio.to_thread.run_sync(_floor, fleet, b.pane, floor_text, floor_marker)
                at, _ = await anyio.to_thread.run_sync(_received, fleet, b, mark, floor_marker)
                result.floor.append(elapsed)
                result.floor_received.append(at - t0)
            except Exception as exc:  # noqa: BLE001
                result.failures.append(("floor", n, f"{type(exc).__name__}: {str(exc)[:300]}"))


def _received(fleet: LiveFleet, b: Agent, mark: int, marker: str) -> tuple[float, str]:
    """When the model server got the prompt holding ``marker`` (a request after ``mark``), and its text."""

    def find() -> tuple[float, str] | None:
        for request in fleet.model.requests[mark:]:
            if request.api_key == b.key and request.scripted:
                text = next((t for t in request.user_texts if marker in t), None)
                if text is not None:
                    return request.at, text
        return None

    found: tuple[float, str] = wait_for(find, FLOOR_TIMEOUT, f"the model server to receive {marker!r}", every=0.01)
    return found


def _floor(fleet: LiveFleet, pane: str, text: str, marker: str) -> tuple[float, float]:
    tmux = fleet.tmux
    buffer = f"bench-{secrets.token_hex(4)}"
    start = time.time()
    subprocess.run(
        [*tmux.argv, "load-buffer", "-b", buffer, "-", ";", "paste-buffer", "-p", "-d", "-b", buffer, "-t", pane],
        input=text.encode(), check=True, env=tmux.env, timeout=10,
    )
    subprocess.run([*tmux.argv, "send-keys", "-t", pane, "Enter"], check=True, env=tmux.env, timeout=10)
    deadline = time.monotonic() + FLOOR_TIMEOUT
    while time.monotonic() < deadline:
        body, cursor, height, command = _capture(fleet, pane)
        reading = read_screen(body, command, cursor, height=height)
        seen = marker in " ".join(line.strip() for line in body.split("\n"))
        if reading.activity is Activity.BUSY or (seen and reading.composer is Composer.EMPTY):
            return start, time.time() - start
        time.sleep(0.01)
    raise RuntimeError(f"the floor's paste was not seen submitted within {FLOOR_TIMEOUT:.0f} s")


def _capture(fleet: LiveFleet, pane: str) -> tuple[str, tuple[int, int], int, str]:
    """The visible screen, the cursor, the height and the pane's command, from one tmux call."""
    tmux = fleet.tmux
    out = subprocess.run(
        [*tmux.argv, "capture-pane", "-p", "-t", pane, ";", "display-message", "-p", "-t", pane,
         "#{cursor_x} #{cursor_y} #{pane_height} #{pane_current_command}"],
        capture_output=True, env=tmux.env, timeout=10,
    ).stdout.decode("utf-8", "replace")
    body, _, meta = out.removesuffix("\n").rpartition("\n")
    x, y, height, command = (meta.split(" ", 3) + ["", "", "", ""])[:4]
    return body, (int(x), int(y)), int(height), command


def _ready(fleet: LiveFleet, b: Agent) -> bool:
    """Idle with an empty composer on its screen (tmux itself) and in the daemon's view."""
    body, cursor, height, command = _capture(fleet, b.pane)
    reading = read_screen(body, command, cursor, height=height)
    return reading.activity is Activity.IDLE and reading.composer is Composer.EMPTY and fleet.ready(b)


def _settled(fleet: LiveFleet, b: Agent) -> bool:
    """B ready, then a pause (an agent idle for a while), then still ready; False after the bound."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if _ready(fleet, b):
            time.sleep(0.5)
            if _ready(fleet, b):
                return True
        time.sleep(0.05)
    return False
