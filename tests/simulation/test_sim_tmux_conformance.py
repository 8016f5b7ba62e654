"""SimTmux against the real adapter: the same port (signatures), and the same behaviour on a private
tmux server for what both share (a missing pane, a paste, the Enter a paste owes, options, a respawn,
a new window, the lock)."""

from __future__ import annotations

import inspect
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
import trio

from connectd.tmux.adapter import TYPING_OPTION, TmuxAdapter, TmuxError
from tests.simulation.sim_tmux import SimServer, SimTmux, port_methods
from tests.support.tmux_server import TmuxServer


@pytest.mark.parametrize("name", port_methods())
def test_simtmux_has_the_adapters_signature(name: str) -> None:
    real, sim = getattr(TmuxAdapter, name), getattr(SimTmux, name)
    assert inspect.iscoroutinefunction(real) == inspect.iscoroutinefunction(sim), name
    assert list(inspect.signature(real).parameters) == list(inspect.signature(sim).parameters), name


def test_every_adapter_call_the_daemon_makes_is_simulated() -> None:
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "connectd"
    used = {m for path in src.rglob("*.py") for m in re.findall(r"\.tmux\.([a-z_]+)\(", path.read_text())}
    assert used <= set(port_methods()), used - set(port_methods())


async def _shared_behaviour(tmux: Any, pane: str) -> list[object]:
    seen: list[object] = []
    try:
        await tmux.capture("%999")
    except TmuxError:
        seen.append("capture of a missing pane: TmuxError")
    await tmux.paste_text(pane, "hello-sim")
    await anyio.sleep(0.5)
    seen.append(("a paste shows in the capture", "hello-sim" in (await tmux.capture(pane, 10)).text))
    seen += await _owed_enters(tmux, pane)
    seen.append(await tmux.get_pane_option(pane, "remain-on-exit"))
    await tmux.set_pane_option(pane, "remain-on-exit", "on")
    seen.append(await tmux.get_pane_option(pane, "remain-on-exit"))
    await tmux.set_pane_option(pane, "remain-on-exit", None)
    seen.append(await tmux.get_pane_option(pane, "remain-on-exit"))
    try:
        await tmux.respawn(pane, ["sleep", "30"], "/", {})
    except TmuxError:
        seen.append("respawn of a live pane without kill: TmuxError")
    before = next(p for p in await tmux.list_panes() if p.pane_id == pane)
    await tmux.respawn(pane, ["sleep", "30"], "/", {}, kill=True)
    after = next(p for p in await tmux.list_panes() if p.pane_id == pane)
    seen.append(("a respawn keeps the pane id and changes its process", before.pane_pid != after.pane_pid))
    owed = await tmux.paste_text(pane, "owed across a respawn", submit_after=5)
    await tmux.respawn(pane, ["sleep", "30"], "/", {}, kill=True)
    seen.append(("the Enter owed stays with the pane", await tmux.get_pane_option(pane, TYPING_OPTION) == owed))
    new = await tmux.new_window("main", ["sleep", "30"], "/", {})
    seen.append(("a new window is listed", new in {p.pane_id for p in await tmux.list_panes()}))
    seen.append(await tmux.has_pane(new))
    with anyio.fail_after(5):
        async with tmux.pane_lock(pane):
            seen.append("pane_lock is an async lock")
    return seen


async def _owed_enters(tmux: Any, pane: str) -> list[object]:
    """The guarded Enter, seen through the pane option that holds the token of the paste whose Enter
    is owed: set by a paste with submit, cleared by the first Enter (early or fallback), never by an
    earlier paste's; a paste without submit cancels it."""

    async def owed() -> str | None:
        return await tmux.get_pane_option(pane, TYPING_OPTION)  # type: ignore[no-any-return]

    seen: list[object] = []
    first = await tmux.paste_text(pane, "a", submit_after=5)
    seen.append(("a paste with submit owes its Enter", first is not None and await owed() == first))
    await tmux.enter_once(pane, first)
    seen.append(("the early Enter pays it", await owed()))
    await tmux.enter_once(pane, first)
    seen.append(("a second early Enter changes nothing", await owed()))
    early = await tmux.paste_text(pane, "b", submit_after=0.2)
    later = await tmux.paste_text(pane, "c", submit_after=5)
    await anyio.sleep(0.5)
    seen.append(("an earlier paste's fallback leaves a later one owed", early != later and await owed() == later))
    await tmux.enter_once(pane, early)
    seen.append(("and so does its early Enter", await owed() == later))
    await tmux.paste_text(pane, "d")
    seen.append(("a paste without submit cancels the owed Enter", await owed()))
    await tmux.paste_text(pane, "e", submit_after=0.2)
    await anyio.sleep(0.5)
    seen.append(("the fallback alone pays it", await owed()))
    await tmux.enter_once("%999", "0123456789ab")
    seen.append("an early Enter for a missing pane: nothing")
    return seen


@pytest.fixture
def real() -> Iterator[tuple[TmuxAdapter, str]]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    with TmuxServer("connect-simconf") as server:
        pane = server.new_session("main", ["cat"])
        yield TmuxAdapter(socket_name=server.socket_name), pane


def test_simtmux_behaves_as_real_tmux_where_the_daemon_relies_on_it(real: tuple[TmuxAdapter, str]) -> None:
    adapter, pane = real
    on_real = anyio.run(_shared_behaviour, adapter, pane)

    async def on_sim() -> list[object]:
        server = SimServer(trio.current_time)
        sim_pane = server.open_pane(["claude"])
        async with trio.open_nursery() as nursery:

            def later(at: float, fn: Callable[[], None]) -> None:
                async def timer() -> None:
                    await trio.sleep_until(at)
                    fn()

                nursery.start_soon(timer)

            server.later = later
            seen = await _shared_behaviour(server.view(), sim_pane)
            nursery.cancel_scope.cancel()
        return seen

    assert anyio.run(on_sim, backend="trio") == on_real
