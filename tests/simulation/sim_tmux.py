"""A simulated tmux server: panes with processes, screens drawn by scripted agents, faults on demand.

:class:`SimServer` is the world (one tmux server): panes, their processes (pid, start time: one
incarnation each), the stand-in agents that draw Claude-Code-shaped screens (the shapes
:func:`connectcore.screen.read_screen` reads, as ``connectd.cli.demo_agent`` draws them), and the person
who types into composers and opens menus. Time is the simulation's virtual clock; an agent's turn
ends by itself (its screen is a function of the clock), so agents need no tasks.

:class:`SimTmux` is one daemon's view of that server: the same async methods as
:class:`connectd.tmux.adapter.TmuxAdapter` that the engine uses, each a fault point (``SimServer.faults``
decides whether the call fails, whether the pane exits just before it, whether the daemon is
killed there). Every daemon generation gets its own view (its own send locks, as a new process
would); once its daemon is killed, every call of that view parks until the cancellation lands.

Ground truth for the invariants is recorded here: every paste with what the pane showed at that
moment and whether the daemon could have seen it, every capture the daemon was given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import trio

from connectcore import directory as D
from connectd.tmux.adapter import (
    TYPING_OPTION,
    Capture,
    PaneInfo,
    SessionInfo,
    TmuxError,
    TmuxInputError,
    check_pane_id,
)

RULE = "─"
WIDTH, HEIGHT = 100, 30
SERVER_PID, SERVER_START = 4242, 777


@dataclass
class Agent:
    """A stand-in agent process in a pane: a Claude-Code-like screen, turns that end by themselves."""

    pid: int
    start: int
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    command: str = "claude"
    transcript: list[str] = field(default_factory=list)
    composer: str = ""
    busy_until: float = 0.0
    starts_at: float = 0.0  # when the running turn shows its spinner (before: submitted, not started)
    pending_reply: str | None = None
    dialog: bool = False
    prompts: list[tuple[float, str]] = field(default_factory=list)  # every submitted prompt
    exited: bool = False

    def advance(self, now: float) -> None:
        if self.pending_reply is not None and now >= self.busy_until:
            self.transcript += [self.pending_reply, ""]
            self.pending_reply = None

    def busy(self, now: float) -> bool:
        return now < self.busy_until

    def screen(self, now: float) -> tuple[list[str], tuple[int, int]]:
        self.advance(now)
        head = [" ▐▛███▜▌   Claude Code v2.1.332 · Sim agent (claude-like)", "▝▜█████▛▘  session sim", f"  ▘▘ ▝▝    {self.cwd}"]
        head.append("")
        if self.dialog:
            foot = [
                RULE * WIDTH,
                " Bash command: rm -rf build",
                "",
                " Do you want to proceed?",
                " ❯ 1. Yes",
                "   2. No",
                "",
                " Esc to cancel",
            ]
            return head + [""] * (HEIGHT - len(head) - len(foot)) + foot, (0, HEIGHT - 1)
        else:
            lines = self.composer.split("\n")
            composer = ["❯ " + lines[0]] + ["  " + line for line in lines[1:]]
            foot = [RULE * WIDTH, *composer, RULE * WIDTH, "  ⏵⏵ auto mode on (shift+tab to cycle)"]
            if self.starts_at <= now < self.busy_until:
                foot = [f"✻ Working… ({int(self.busy_until - now)}s · esc to interrupt)", "", *foot]
        room = max(0, HEIGHT - len(head) - len(foot))
        body = self.transcript[-room:] if room else []
        screen = head + body + [""] * (room - len(body)) + foot
        row = len(screen) - len(foot) + foot.index(composer[0]) + self.composer.count("\n")
        return screen, (2 + len(self.composer.split("\n")[-1]), row)

    def clean(self, now: float) -> bool:
        """Idle, no menu, an empty composer: the one state text may be typed in."""
        self.advance(now)
        return not self.busy(now) and not self.dialog and not self.composer


@dataclass
class Pane:
    pane_id: str
    session: str
    window_index: int
    agent: Agent | None  # None: dead (kept by remain-on-exit)
    options: dict[str, str] = field(default_factory=dict)
    dead_status: int | None = None
    version: int = 0  # bumped at every change of what the screen shows
    title: str = ""


@dataclass
class Paste:
    """One paste the daemon made, with what the pane showed then (ground truth for the invariants)."""

    at: float
    pane_id: str
    pid: int
    text: str
    clean: bool  # idle, no menu, empty composer
    seen_version: bool  # the daemon's last capture of this pane showed this very screen
    generation: int
    incarnation: str = ""  # the incarnation token of the process the text went into


class Faults:
    """What goes wrong at a call: the default injects nothing (the driver sets the odds)."""

    def before(self, view: SimTmux, op: str, pane_id: str | None) -> None:
        """Called before each tmux call; may raise TmuxError, kill the pane, or kill the daemon."""

    def lost_paste(self, pane_id: str) -> bool:
        return False

    def after(self, view: SimTmux, op: str, pane_id: str | None) -> None:
        """Called once a paste or an Enter reached the pane; may kill the daemon."""

    def on_lock(self, pane_id: str) -> None:
        """Called as the daemon asks for a pane's send lock (the moment before its guard reads the pane)."""


class SimServer:
    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.panes: dict[str, Pane] = {}
        self.sessions = ["main"]
        self._next_pane = 0
        self._next_pid = 1000
        self.faults = Faults()
        self.pastes: list[Paste] = []
        self.captures: dict[
            str, list[tuple[float, int, str]]
        ] = {}  # pane -> (at, pid, text) given to a daemon
        self.last_captured: dict[
            str, tuple[int, int]
        ] = {}  # pane -> (pid, version) of the daemon's last capture
        self.ops = 0  # tmux calls made, for steps/s
        self.tokens = 0  # paste tokens handed out
        self.enters: list[tuple[float, str, str, str]] = []  # (at, pane, token, "early" | "fallback")
        self.generation = 0  # the daemon generation whose view is live
        self.on_paste: Callable[[Paste], None] = lambda paste: None
        self.turn_length: Callable[[], float] = lambda: 3.0  # an agent's turn after a submitted prompt
        self.exit_delay: Callable[[], float] = lambda: 1.0  # from /exit to the process's end
        # From the daemon's Enter to the turn's start: the prompt shows submitted and nothing else yet,
        # no spinner (the screen a message must never be typed into, and that reads as idle). A
        # person's prompts start at once: one submitted between two looks no reader could see.
        self.start_delay: Callable[[], float] = lambda: 0.0
        # The control-mode reader's %output notification (the driver forwards it to the live daemon),
        # and a timer for what an agent draws later (the end of its turn).
        self.on_output: Callable[[str], None] = lambda pane_id: None
        self.later: Callable[[float, Callable[[], None]], None] = lambda at, fn: None

        self.over = trio.Event()  # the run ended: calls parked by killed daemons are let go

    async def park(self) -> None:
        """Where a killed daemon's calls stop, as in a process that got SIGKILL: nothing of it runs
        again. Cancellation ends the wait; a call the daemon shields from cancellation stays parked
        until the run ends, and then fails (its daemon is long gone; nothing it does reaches anyone)."""
        await self.over.wait()
        raise TmuxError("the simulation ended (a killed daemon's call)")

    # --- the world (the driver and the person act through these) ----------------------------------

    def spawn_agent(self, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> Agent:
        self._next_pid += 1
        command = (
            "claude"
            if argv and argv[0].endswith("claude")
            else (argv[0].rsplit("/", 1)[-1] if argv else "sh")
        )
        return Agent(
            pid=self._next_pid,
            start=int(self.now() * 100) + self._next_pid,
            argv=tuple(argv),
            env=dict(env),
            cwd=cwd,
            command=command,
        )

    def open_pane(
        self,
        argv: Sequence[str],
        cwd: str = "/work",
        env: Mapping[str, str] | None = None,
        session: str = "main",
    ) -> str:
        self._next_pane += 1
        pane_id = f"%{self._next_pane}"
        self.panes[pane_id] = Pane(pane_id, session, self._next_pane, self.spawn_agent(argv, cwd, env or {}))
        return pane_id

    def changed(self, pane: Pane) -> None:
        pane.version += 1
        self.on_output(pane.pane_id)

    def agent_exits(self, pane_id: str, status: int = 0) -> None:
        """The pane's process ends: the pane goes, or stays dead under remain-on-exit."""
        pane = self.panes.get(pane_id)
        if pane is None or pane.agent is None:
            return
        pane.agent.exited = True
        if pane.options.get("remain-on-exit") in ("on", "failed"):
            pane.agent, pane.dead_status = None, status
            self.changed(pane)
        else:
            del self.panes[pane_id]

    def replace_process(self, pane_id: str, resume: bool = False) -> None:
        """Someone respawns the pane with a new agent process (a new incarnation, not connected). With
        ``resume`` (``claude --resume``) the new process redraws the old one's conversation: the same
        idle screen, a different incarnation."""
        pane = self.panes.get(pane_id)
        if pane is not None:
            old = pane.agent
            pane.agent = self.spawn_agent(("claude",), old.cwd if resume and old else "/work", {})
            if resume and old is not None:
                pane.agent.transcript = list(old.transcript)
            pane.dead_status = None
            self.changed(pane)

    def person_types(self, pane_id: str, text: str) -> None:
        agent = self._agent(pane_id)
        if agent is not None and not agent.dialog:
            agent.composer += text
            self.changed(self.panes[pane_id])

    def person_clears(self, pane_id: str) -> None:
        agent = self._agent(pane_id)
        if agent is not None and agent.composer:
            agent.composer = ""
            self.changed(self.panes[pane_id])

    def person_submits(self, pane_id: str, text: str, turn: float) -> None:
        agent = self._agent(pane_id)
        if agent is not None and agent.clean(self.now()):
            agent.composer = text
            self._enter(self.panes[pane_id], turn)

    def open_menu(self, pane_id: str) -> None:
        agent = self._agent(pane_id)
        if agent is not None and not agent.busy(self.now()):
            agent.dialog = True
            self.changed(self.panes[pane_id])

    def answer_menu(self, pane_id: str) -> None:
        agent = self._agent(pane_id)
        if agent is not None and agent.dialog:
            agent.dialog = False
            agent.transcript += ["⏺ Allowed.", ""]
            self.changed(self.panes[pane_id])

    def _agent(self, pane_id: str) -> Agent | None:
        pane = self.panes.get(pane_id)
        if pane is None or pane.agent is None:
            return None
        pane.agent.advance(self.now())
        return pane.agent

    def _enter(self, pane: Pane, turn: float | None = None, start: float = 0.0) -> None:
        agent = pane.agent
        assert agent is not None
        now = self.now()
        if agent.dialog:  # Enter answers the menu with its selected option
            self.answer_menu(pane.pane_id)
            return
        if agent.busy(now) or not agent.composer.strip():
            return
        prompt, agent.composer = agent.composer, ""
        agent.prompts.append((now, prompt))
        agent.transcript += ["> " + line for line in prompt.split("\n")] + [""]
        self.changed(pane)
        if prompt.strip() == "/exit":  # the agent saves its session and exits a moment later
            agent.busy_until = now + self.exit_delay()
            self.later(agent.busy_until, lambda: self._exited(pane.pane_id, agent))
            return
        agent.starts_at = now + start
        agent.busy_until = agent.starts_at + (turn if turn is not None else self.turn_length())
        agent.pending_reply = f"⏺ Received {len(prompt)} characters."
        if start > 0:
            self.later(agent.starts_at, lambda: self._turn_ended(pane.pane_id, agent))  # the spinner shows
        self.later(agent.busy_until, lambda: self._turn_ended(pane.pane_id, agent))

    def owe_enter(self, pane: Pane, delay: float) -> str:
        """tmux's paste call with its guarded fallback: the pane's ``@connect-typing`` option holds a
        new token, and ``delay`` seconds later the server presses Enter if it still does."""
        self.tokens += 1
        token = f"{self.tokens:012x}"
        pane.options[TYPING_OPTION] = token
        self.later(self.now() + delay, lambda: self.press_owed(pane.pane_id, token, "fallback"))
        return token

    def press_owed(self, pane_id: str, token: str, how: str) -> None:
        """The guarded Enter (``if-shell -F`` on the option, then ``send-keys Enter`` and unset, in one
        command): pressed only while the pane's option holds this token, so exactly once, and never
        for a later paste. As in tmux, the option belongs to the pane, not to its process: a pane
        respawned meanwhile gets the Enter in its new process; a dead one gets none."""
        pane = self.panes.get(pane_id)
        if pane is None or pane.options.get(TYPING_OPTION) != token:
            return
        del pane.options[TYPING_OPTION]
        self.enters.append((self.now(), pane_id, token, how))
        if pane.agent is not None:
            self._enter(pane, start=self.start_delay())

    def _exited(self, pane_id: str, agent: Agent) -> None:
        pane = self.panes.get(pane_id)
        if pane is not None and pane.agent is agent:
            self.agent_exits(pane_id)

    def _turn_ended(self, pane_id: str, agent: Agent) -> None:
        """The screen changes by itself: the turn's spinner shows, or the turn ends."""
        pane = self.panes.get(pane_id)
        if pane is not None and pane.agent is agent:
            agent.advance(self.now())
            self.changed(pane)

    # --- what tmux reports ----------------------------------------------------------------------

    def info(self, pane: Pane) -> PaneInfo:
        agent = pane.agent
        if agent is not None:
            agent.advance(self.now())
        return PaneInfo(
            server_pid=SERVER_PID,
            server_start_time=SERVER_START,
            session_id="$0",
            window_id=f"@{pane.window_index}",
            window_index=pane.window_index,
            pane_id=pane.pane_id,
            pane_pid=agent.pid if agent else None,
            dead=agent is None,
            dead_status=pane.dead_status if agent is None else None,
            width=WIDTH,
            height=HEIGHT,
            cursor_x=0,
            cursor_y=0,
            session_name=pane.session,
            title=pane.title,
            current_command=agent.command if agent else "",
            current_path=agent.cwd if agent else "/",
            process_start_time=agent.start if agent else None,
        )

    def capture_of(self, pane: Pane) -> Capture:
        if pane.agent is None:
            return Capture(text="\n" * HEIGHT, cursor=(0, 0), width=WIDTH, height=HEIGHT)
        screen, cursor = pane.agent.screen(self.now())
        history = pane.agent.transcript[: max(0, len(pane.agent.transcript) - (HEIGHT - 10))][-200:]
        return Capture(text="".join(f"{row}\n" for row in [*history, *screen]), cursor=cursor, width=WIDTH, height=HEIGHT)

    def pane(self, pane_id: str) -> Pane:
        pane = self.panes.get(check_pane_id(pane_id))
        if pane is None:
            raise TmuxError(f"can't find pane: {pane_id}")
        return pane

    def view(self) -> SimTmux:
        """A new daemon's view of this server (the previous daemon's view goes dead)."""
        self.generation += 1
        return SimTmux(self, self.generation)


class SimTmux:
    """The port the engine uses (the async methods of :class:`connectd.tmux.adapter.TmuxAdapter`)."""

    def __init__(self, server: SimServer, generation: int) -> None:
        self.server = server
        self.generation = generation
        self._locks: dict[str, anyio.Lock] = {}
        self.argv: tuple[str, ...] = ("tmux", "-u", "-L", "sim")

    async def _call(self, op: str, pane_id: str | None = None) -> SimServer:
        """Every call: a scheduling point, then the faults, then (if this daemon was killed) park."""
        server = self.server
        if server.generation != self.generation:
            await server.park()  # a killed daemon: its cancellation lands here
        await trio.lowlevel.checkpoint()
        if server.generation != self.generation:
            await server.park()
        server.ops += 1
        server.faults.before(self, op, pane_id)
        if server.generation != self.generation:  # killed at this very call
            await server.park()
        return server

    async def _done(self, op: str, pane_id: str | None) -> None:
        """After a call's effect reached the pane: the daemon may be killed right there."""
        self.server.faults.after(self, op, pane_id)
        if self.server.generation != self.generation:
            await self.server.park()

    # --- locks, as the adapter ---------------------------------------------------------------------

    def pane_lock(self, pane_id: str) -> anyio.Lock:
        check_pane_id(pane_id)
        if self.server.generation == self.generation:
            self.server.faults.on_lock(pane_id)
        return self._locks.setdefault(pane_id, anyio.Lock())

    def forget_pane_locks(self, live_pane_ids: set[str]) -> None:
        for pane_id, lock in list(self._locks.items()):
            stats = lock.statistics()
            if pane_id not in live_pane_ids and not stats.locked and not stats.tasks_waiting:
                del self._locks[pane_id]

    # --- structure --------------------------------------------------------------------------------

    async def server_running(self) -> bool:
        await self._call("server_running")
        return True

    async def list_sessions(self) -> list[SessionInfo]:
        server = await self._call("list_sessions")
        return [SessionInfo(f"${i}", name) for i, name in enumerate(server.sessions)]

    async def list_panes(self) -> list[PaneInfo]:
        server = await self._call("list_panes")
        return [server.info(p) for p in sorted(server.panes.values(), key=lambda p: p.window_index)]

    async def has_pane(self, pane_id: str) -> bool:
        server = await self._call("has_pane", check_pane_id(pane_id))
        return pane_id in server.panes

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        server = await self._call("capture", check_pane_id(pane_id))
        pane = server.pane(pane_id)
        capture = server.capture_of(pane)
        pid = pane.agent.pid if pane.agent else 0
        server.captures.setdefault(pane_id, []).append((server.now(), pid, capture.text))
        server.last_captured[pane_id] = (pid, pane.version)
        return capture

    # --- input ------------------------------------------------------------------------------------

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:
        """As tmux: the paste, and with ``submit_after`` the Enter the server owes it, pressed that many
        seconds later unless the early Enter (:meth:`enter_once`) came first (the fallback follows even
        if the daemon is killed meanwhile: it is the server's timer, not the daemon's)."""
        if submit_after is not None and not 0 <= submit_after <= 10:
            raise TmuxInputError(f"submit_after must be between 0 and 10 seconds, got {submit_after}")
        if not isinstance(text, str) or not text:
            raise TmuxInputError("paste text must be a non-empty string")
        server = await self._call("paste_text", check_pane_id(pane_id))
        pane = server.pane(pane_id)
        agent = pane.agent
        if agent is None:
            raise TmuxError(f"pane {pane_id} is dead")
        clean = agent.clean(server.now())
        seen = server.last_captured.get(pane_id) == (agent.pid, pane.version)
        incarnation = D.incarnation_token(
            D.Incarnation(SERVER_PID, SERVER_START, pane_id, agent.pid, agent.start)
        )
        paste = Paste(server.now(), pane_id, agent.pid, text, clean, seen, self.generation, incarnation)
        server.pastes.append(paste)
        server.on_paste(paste)
        if not server.faults.lost_paste(pane_id) and not agent.dialog:
            agent.composer += text
            server.changed(pane)
        token = None
        if submit_after is not None:
            token = server.owe_enter(pane, submit_after)
        else:
            pane.options.pop(TYPING_OPTION, None)  # a paste without submit cancels an owed Enter
        await self._done("paste_text", pane_id)
        return token

    async def enter_once(self, pane_id: str, token: str) -> None:
        """The early Enter: tmux's guarded Enter for this paste (nothing if it was pressed, if a later
        paste took its place, or if the pane is gone)."""
        server = await self._call("enter_once", check_pane_id(pane_id))
        server.press_owed(pane_id, token, "early")
        await self._done("enter_once", pane_id)

    async def press_enter(self, pane_id: str) -> None:
        server = await self._call("press_enter", check_pane_id(pane_id))
        pane = server.pane(pane_id)
        if pane.agent is None:
            raise TmuxError(f"pane {pane_id} is dead")
        server._enter(pane)
        await self._done("press_enter", pane_id)

    async def send_exit_command(self, pane_id: str, command: str, *, settle: float = 0.4) -> None:
        """As the real adapter: the paste has the server owe its Enter, and the early Enter after
        ``settle`` is that same Enter, so a failed Enter or a daemon killed in between still submits."""
        token = await self.paste_text(pane_id, command, submit_after=settle)
        await anyio.sleep(settle)
        if token is None:
            return
        with contextlib.suppress(TmuxError):  # the server presses the Enter it owes once settle has passed
            await self.enter_once(pane_id, token)

    # --- options ----------------------------------------------------------------------------------

    async def get_pane_option(self, pane_id: str, name: str) -> str | None:
        server = await self._call("get_pane_option", check_pane_id(pane_id))
        return server.pane(pane_id).options.get(name)

    async def set_pane_option(self, pane_id: str, name: str, value: str | None) -> None:
        server = await self._call("set_pane_option", check_pane_id(pane_id))
        pane = server.pane(pane_id)
        if value is None:
            pane.options.pop(name, None)
            if name == "remain-on-exit" and pane.agent is None:  # tmux closes a dead pane no longer kept
                del server.panes[pane_id]
        else:
            pane.options[name] = value

    # --- processes --------------------------------------------------------------------------------

    async def respawn(
        self, pane_id: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], *, kill: bool = False
    ) -> None:
        server = await self._call("respawn", check_pane_id(pane_id))
        pane = server.pane(pane_id)
        if pane.agent is not None and not kill:
            raise TmuxError(f"respawn pane failed: pane {pane_id} still active")
        pane.agent, pane.dead_status = server.spawn_agent(argv, cwd, env), None
        server.changed(pane)

    async def new_window(self, session: str, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> str:
        server = await self._call("new_window")
        if session not in server.sessions:
            raise TmuxError(f"can't find session: {session}")
        return server.open_pane(argv, cwd, env, session)

    async def kill_pane(self, pane_id: str) -> None:
        server = await self._call("kill_pane", check_pane_id(pane_id))
        server.panes.pop(server.pane(pane_id).pane_id)

    async def reap(self) -> None:
        await self._call("reap")


def agent_of(server: SimServer, pane_id: str) -> Agent | None:
    pane = server.panes.get(pane_id)
    return pane.agent if pane else None


def port_methods() -> tuple[str, ...]:
    """The adapter methods the engine uses, which SimTmux must share (the conformance test checks them)."""
    return (
        "server_running",
        "list_sessions",
        "list_panes",
        "has_pane",
        "capture",
        "paste_text",
        "enter_once",
        "press_enter",
        "send_exit_command",
        "get_pane_option",
        "set_pane_option",
        "respawn",
        "new_window",
        "kill_pane",
        "reap",
        "pane_lock",
        "forget_pane_locks",
    )
