"""Confirmed delivery to an idle pane: connectd vs the floor of doing it by hand.

connectd: agent A calls ``send_message`` to agent B (the pair approved beforehand, B idle with an
empty composer), then ``get_message`` with a wait, which returns as soon as the outcome is final; the
figure is the wall time from the call to ``delivered``. Inside it: the guard's fresh capture, the
paste, a settle pause (``Timing.settle``), Enter, and re-reads every 0.2 s until the text is seen
submitted.

Floor: the same bytes into the same pane straight through tmux from this process: one ``load-buffer``
+ ``paste-buffer -p -d``, ``send-keys Enter`` at once, then ``capture-pane`` every 10 ms until the text
is visible and the composer is empty again (the confirmation rule connectd uses).

The trials alternate (connectd, floor, connectd, ...) on the same pane; B's own log gives the moment
it received each prompt, for both.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from benchlib.common import AgentHandle, Fleet, log, pct, wait_for
from connectcore.screen import Activity, Composer, read_screen
from tests.support.daemon import call, mcp_agent

TEXT = "bench {n}: please reply with the build status of the parser branch when you are done"


@dataclass
class Delivery:
    connectd: list[float] = field(default_factory=list)  # send_message -> get_message says delivered
    connectd_received: list[float] = field(default_factory=list)  # send_message -> B logged the prompt
    floor: list[float] = field(default_factory=list)  # paste -> seen submitted
    floor_received: list[float] = field(default_factory=list)
    typed_bytes: int = 0

    def row(self) -> dict[str, Any]:
        return {k: [round(x * 1000, 1) for x in v] for k, v in self.__dict__.items() if isinstance(v, list)}


def _received_at(agent: AgentHandle, marker: str, timeout: float = 10.0) -> float:
    def find() -> float | None:
        if not agent.log.exists():
            return None
        for line in agent.log.read_text().splitlines():
            row = json.loads(line)
            if marker in row.get("prompt", ""):
                return float(row["at"])
        return None

    return float(wait_for(find, timeout, f"{agent.name} to log {marker!r}", every=0.02))


def _floor(fleet: Fleet, pane: str, text: str, marker: str) -> float:
    tmux = fleet.tmux
    buffer = f"bench-{secrets.token_hex(4)}"
    start = time.time()
    subprocess.run(
        [*tmux.argv, "load-buffer", "-b", buffer, "-", ";", "paste-buffer", "-p", "-d", "-b", buffer, "-t", pane],
        input=text.encode(),
        check=True,
        env=tmux.env,
    )
    subprocess.run([*tmux.argv, "send-keys", "-t", pane, "Enter"], check=True, env=tmux.env)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        body, cursor, height = _capture(fleet, pane)
        reading = read_screen(body, "claude", cursor, height=height)
        seen = marker in " ".join(line.strip() for line in body.split("\n"))
        if reading.activity is Activity.BUSY or (seen and reading.composer is Composer.EMPTY):
            return time.time() - start
        time.sleep(0.01)
    raise RuntimeError("the floor's paste never showed up")


def _capture(fleet: Fleet, pane: str) -> tuple[str, tuple[int, int], int]:
    """The visible screen, the cursor and the height, from one tmux call (as connectd reads a pane)."""
    tmux = fleet.tmux
    out = subprocess.run(
        [*tmux.argv, "capture-pane", "-p", "-t", pane, ";", "display-message", "-p", "-t", pane,
         "#{cursor_x} #{cursor_y} #{pane_height}"],
        capture_output=True,
        env=tmux.env,
    ).stdout.decode("utf-8", "replace")
    body, _, meta = out.removesuffix("\n").rpartition("\n")
    x, y, height = (int(v) for v in meta.split())
    return body, (x, y), height


async def _connectd_trial(client: Any, to: str, n: int) -> tuple[float, float]:
    text = TEXT.format(n=n)
    start = time.time()
    err, sent = await call(client, "send_message", to=to, text=text, message_id=f"bench-{n}")
    if err or sent["outcome"] not in ("queued", "delivered"):
        raise RuntimeError(f"send_message: {sent}")
    err, got = await call(client, "get_message", message_id=f"bench-{n}", wait=30)
    if err or got["outcome"] != "delivered":
        raise RuntimeError(f"get_message: {got}")
    return start, time.time() - start


def measure(fleet: Fleet, a: AgentHandle, b: AgentHandle, trials: int) -> Delivery:
    result = Delivery()
    d = fleet.d
    assert a.token is not None

    async def session() -> None:
        async with mcp_agent(d.mcp_url, a.token or "") as client:
            # Approve the pair once (the card of a first message), then wait until that one landed.
            err, sent = await call(client, "send_message", to=b.address, text="hello", message_id="bench-approve")
            assert not err, sent
            card = await anyio.to_thread.run_sync(d.wait_card)
            await anyio.to_thread.run_sync(lambda: d.api("POST", f"/api/cards/{card['id']}/approve", {"pair": True}))
            err, got = await call(client, "get_message", message_id="bench-approve", wait=30)
            assert not err and got["outcome"] == "delivered", got
            for n in range(trials):
                await anyio.to_thread.run_sync(lambda: _ready(fleet, b))
                start, elapsed = await _connectd_trial(client, b.address, n)
                result.connectd.append(elapsed)
                marker = f"bench {n}: please"
                result.connectd_received.append(_received_at(b, marker) - start)
                await anyio.to_thread.run_sync(lambda: _ready(fleet, b))
                typed = _typed_text(b, marker)
                result.typed_bytes = len(typed.encode())
                floor_marker = f"floor {n}: please"
                floor_text = typed.replace(marker, floor_marker).replace("[connect]", "[floor]")
                t0 = time.time()
                result.floor.append(await anyio.to_thread.run_sync(_floor, fleet, b.pane, floor_text, floor_marker))
                result.floor_received.append(_received_at(b, floor_marker) - t0)

    anyio.run(session)
    log(
        f"delivery: connectd p50 {pct(result.connectd, 50) * 1000:.0f} ms (received "
        f"{pct(result.connectd_received, 50) * 1000:.0f} ms), floor p50 {pct(result.floor, 50) * 1000:.0f} ms"
    )
    return result


def _screen_idle(fleet: Fleet, pane: str) -> bool:
    """Ground truth from tmux itself (the daemon's view may still be the one from before a turn)."""
    body, cursor, height = _capture(fleet, pane)
    reading = read_screen(body, "claude", cursor, height=height)
    return reading.activity is Activity.IDLE and reading.composer is Composer.EMPTY


def _ready(fleet: Fleet, agent: AgentHandle) -> None:
    """B idle on its screen, then in the daemon's view, then a pause: an agent idle for a while."""
    wait_for(lambda: _screen_idle(fleet, agent.pane), 30, f"{agent.name} idle on screen", every=0.02)
    fleet.wait_idle([agent], timeout=30)
    time.sleep(0.5)


def _typed_text(agent: AgentHandle, marker: str) -> str:
    return next(p for p in agent.prompts() if marker in p)
