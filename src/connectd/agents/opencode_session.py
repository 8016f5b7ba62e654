"""Bind a connected OpenCode launch to its session through the process's own server.

The I/O half of :mod:`connectcore.opencode_binding` (the rules, and why: docs/compatibility.md,
"OpenCode"). A connected launch made OpenCode serve on ``127.0.0.1:<port>`` behind a per-launch
password; :func:`bind` waits (bounded) until that port's listener is the pane's own process tree,
creates a session there for the launch's directory and selects it in the TUI. It returns the session
id, or the :class:`~connectcore.opencode_binding.Refusal` that leaves the pane unbound. Call it once
the pane reads as OpenCode (its TUI is up and listening for the selection).
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx2

from connectcore import opencode_binding as OC
from connectd.tmux import procfs

T = TypeVar("T")


async def _default_run_sync(fn: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(fn)


def free_port() -> int:
    """A loopback port free right now, for a launch's own server. Another program may take it before
    OpenCode listens: the binding then finds a listener outside the pane and refuses (never a guess)."""
    with socket.socket() as s:
        s.bind((OC.HOSTNAME, 0))
        return int(s.getsockname()[1])


def _listener(port: int, pane_pid: int) -> OC.Refusal | None:
    return OC.listener_refusal(port, procfs.tcp_listeners(), procfs.tree_socket_inodes(pane_pid))


async def bind(
    *,
    port: int,
    password: str,
    directory: str,
    pane_pid: int,
    wait: float = 60.0,
    every: float = 0.25,
    run_sync: Callable[[Callable[[], Any]], Awaitable[Any]] = _default_run_sync,
) -> str | OC.Refusal:
    """The session bound to the OpenCode process of ``pane_pid`` (created and selected), or why not.

    Waits up to ``wait`` seconds for the listener on ``port`` to appear; a listener outside the pane's
    process tree is refused at once (never talked to: it would get the password)."""
    OC.check_port(port)
    refusal: OC.Refusal | None = OC.Refusal.NO_LISTENER
    with anyio.move_on_after(wait):
        while True:
            refusal = await run_sync(lambda: _listener(port, pane_pid))
            if refusal is not OC.Refusal.NO_LISTENER:
                break
            await anyio.sleep(every)
    if refusal is not None:
        return refusal
    params = {"directory": directory}
    async with httpx2.AsyncClient(
        base_url=f"http://{OC.HOSTNAME}:{port}", auth=(OC.SERVER_USER, password), timeout=30
    ) as http:
        try:
            created = await http.post(OC.CREATE_PATH, params=params, json={})
            found = OC.created_session(created.status_code, _json(created), directory=directory)
            if isinstance(found, OC.Refusal):
                return found
            chosen = await http.post(OC.SELECT_PATH, params=params, json={"sessionID": found})
        except httpx2.HTTPError:
            return OC.Refusal.NO_LISTENER  # it went away between the check and the call
        refused = OC.selected(chosen.status_code, _json(chosen))
    return refused if refused is not None else found


def _json(response: httpx2.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return None
