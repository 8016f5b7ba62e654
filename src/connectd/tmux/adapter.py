"""The tmux adapter: list, capture, paste, options, respawn and launch on one tmux server.

Every call is one `tmux -u [-L NAME | -S PATH] ...` subprocess whose exit status and stderr are checked
(a failure raises `TmuxError` with tmux's own message). libtmux's runner is not used for these calls: it
drops trailing blank lines (a capture must keep them), cannot pass stdin (load-buffer) and cannot pass
`-u` (without a UTF-8 locale tmux turns every non-ASCII byte of its output into `_`). `libtmux_server`
gives the libtmux object model of the same server to code that wants it.

Rules that keep input literal and secrets out of argv:
- Panes are addressed by id (`%N`) only; anything else is refused before tmux runs.
- Text goes in with `load-buffer -b NAME -` from stdin and `paste-buffer -p -d` (no `send-keys`, whose
  argument parsing eats leading `-`, trailing `;` and anything over ~16 KiB). Enter is a separate call.
- The Enter that submits a paste is owed by the tmux server: the paste call stores a fresh token in the
  pane's `@connect-typing` option and schedules a fallback Enter guarded by it; whoever comes first (the
  daemon's early Enter, `enter_once`, or the fallback) presses Enter and unsets the option, inside one
  tmux command, so exactly one Enter is pressed, and never for a later paste (it holds another token).
- A launched program's environment never appears on a command line: a tmux server keeps the argv of
  the client that started it for life. It goes into a 0700 launcher script in a 0700 directory; the
  script deletes itself, exports the environment and `exec`s the argv.
- The caller holds `pane_lock(pane_id)` around paste/Enter; the adapter never takes it itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shlex
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import libtmux

from connectcore.control import NAMED_KEYS
from connectd.tmux import procfs

log = logging.getLogger(__name__)

PANE_ID = re.compile(r"%[0-9]+\Z")
SESSION_ID = re.compile(r"\$[0-9]+\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
OPTION_NAME = re.compile(r"@?[a-z][a-z0-9-]*\Z")
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")

# list-panes fields, in output order. Text fields come last and pass through a tmux substitution that
# replaces control characters with U+FFFD, so the separators below can never occur inside a field
# (titles already refuse them; commands and paths do not).
FIELD_SEP = "\x1f"
PANE_FIELDS: tuple[tuple[str, str], ...] = (
    ("server_pid", "pid"),
    ("server_start_time", "start_time"),
    ("session_id", "session_id"),
    ("window_id", "window_id"),
    ("window_index", "window_index"),
    ("pane_id", "pane_id"),
    ("pane_pid", "pane_pid"),
    ("dead", "pane_dead"),
    ("dead_status", "pane_dead_status"),
    ("width", "pane_width"),
    ("height", "pane_height"),
    ("cursor_x", "cursor_x"),
    ("cursor_y", "cursor_y"),
    ("session_name", "session_name"),
    ("title", "pane_title"),
    ("current_command", "pane_current_command"),
    ("current_path", "pane_current_path"),
    ("activity", "window_activity"),
)
TEXT_FIELDS = frozenset({"session_name", "title", "current_command", "current_path"})
_SANITIZE = "s/[\x01-\x1f\x7f]/\ufffd/:"
PANE_FORMAT = FIELD_SEP.join(
    f"#{{{_SANITIZE}{fmt}}}" if name in TEXT_FIELDS else f"#{{{fmt}}}" for name, fmt in PANE_FIELDS
)
CAPTURE_META = "#{cursor_x} #{cursor_y} #{pane_width} #{pane_height}"
# The pane option that holds the token of the paste whose Enter is still owed (unset: none is).
TYPING_OPTION = "@connect-typing"
NO_SERVER = ("no server running", "error connecting to")

T = TypeVar("T")


class TmuxError(RuntimeError):
    """tmux refused or failed a command; the message is tmux's own."""

    def __init__(self, message: str, command: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.command = tuple(command)


class TmuxNoServer(TmuxError):
    """No tmux server is running on the adapter's socket."""


class TmuxInputError(ValueError):
    """Bad input to the adapter (a malformed pane id, env name, option ...); nothing was sent to tmux."""


@dataclass(frozen=True)
class PaneInfo:
    server_pid: int
    server_start_time: int
    session_id: str
    window_id: str
    window_index: int
    pane_id: str
    pane_pid: int | None
    dead: bool
    dead_status: int | None  # None while alive, and when tmux 3.3a lost the exit (call reap())
    width: int
    height: int
    cursor_x: int
    cursor_y: int
    session_name: str
    title: str
    current_command: str
    current_path: str
    process_start_time: int | None  # field 22 of /proc/<pane_pid>/stat; None when dead or gone
    activity: int = 0  # the window's last output (tmux's window_activity, whole seconds)

    @property
    def incarnation_key(self) -> tuple[int, int, str, int | None, int | None]:
        """Server pid + start time, pane id, pane pid, process start time: one process in one pane."""
        return (self.server_pid, self.server_start_time, self.pane_id, self.pane_pid, self.process_start_time)


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    name: str


@dataclass(frozen=True)
class Capture:
    """A pane's text: optional scrollback then the visible screen (always the last `height` lines), as
    ``capture-pane -p`` prints it: every line ends with a newline, so a blank last row stays a row
    (:func:`connectcore.screen.read_screen` reads that form)."""

    text: str
    cursor: tuple[int, int]  # (x, y) within the visible screen
    width: int
    height: int


def check_pane_id(pane_id: object) -> str:
    if not isinstance(pane_id, str) or not PANE_ID.match(pane_id):
        raise TmuxInputError(f"not a tmux pane id (expected %N): {pane_id!r}")
    return pane_id


def _arg(value: str, what: str) -> str:
    """A free-form argument for tmux's argv: no control characters; a trailing ';' escaped."""
    if CONTROL_CHARS.search(value):
        raise TmuxInputError(f"{what} contains a control character: {value!r}")
    return value[:-1] + "\\;" if value.endswith(";") else value


def _literal(value: str, what: str) -> str:
    """A free-form argument tmux expands as a format (`-c`, `-s`): `#` doubled, so `#(...)` runs nothing."""
    return _arg(value, what).replace("#", "##")


def _session_target(session: str) -> str:
    if SESSION_ID.match(session):
        return session
    if not session or ":" in session or "." in session:
        raise TmuxInputError(f"not a session id or name: {session!r}")
    return "=" + _arg(session, "session name")


class SyncTmux:
    """The blocking adapter (one tmux subprocess per call). `TmuxAdapter` runs these in worker threads."""

    def __init__(
        self,
        socket_name: str | None = None,
        socket_path: str | None = None,
        *,
        config_file: str | None = None,
        launcher_dir: str | os.PathLike[str] | None = None,
        tmux_bin: str = "tmux",
    ) -> None:
        if socket_name is not None and socket_path is not None:
            raise TmuxInputError("give socket_name or socket_path, not both")
        self.socket_name = socket_name
        self.socket_path = socket_path
        self.config_file = config_file
        self.argv: tuple[str, ...] = (
            tmux_bin,
            "-u",
            *(["-L", socket_name] if socket_name else []),
            *(["-S", socket_path] if socket_path else []),
            *(["-f", config_file] if config_file else []),
        )
        self._launcher_base = Path(launcher_dir) if launcher_dir else _default_launcher_base()

    @property
    def libtmux_server(self) -> libtmux.Server:
        return libtmux.Server(
            socket_name=self.socket_name, socket_path=self.socket_path, config_file=self.config_file
        )

    def run(self, *args: str, stdin: bytes | None = None) -> str:
        """Run one tmux command; return stdout; raise TmuxError on a non-zero exit or any stderr."""
        command = [*self.argv, *args]
        proc = subprocess.run(command, input=stdin if stdin is not None else b"", capture_output=True)
        err = proc.stderr.decode("utf-8", "replace").strip()
        if proc.returncode != 0 or err:
            message = err or f"tmux exited with status {proc.returncode}"
            cls = TmuxNoServer if message.startswith(NO_SERVER) else TmuxError
            raise cls(message, command)
        return proc.stdout.decode("utf-8", "replace")

    # --- structure --------------------------------------------------------------------------------

    def server_running(self) -> bool:
        try:
            self.run("display-message", "-p", "#{pid}")
        except TmuxNoServer:
            return False
        return True

    def list_sessions(self) -> list[SessionInfo]:
        """Every session; empty when no server is running."""
        try:
            out = self.run("list-sessions", "-F", f"#{{session_id}}{FIELD_SEP}#{{{_SANITIZE}session_name}}")
        except TmuxNoServer:
            return []
        return [SessionInfo(*line.split(FIELD_SEP, 1)) for line in out.splitlines() if line]

    def list_panes(self) -> list[PaneInfo]:
        """Every pane of the server in one `list-panes -a` call; empty when no server is running. The
        same tmux call reaps first (:meth:`reap`), so a pane whose exit tmux 3.3a missed shows dead."""
        try:
            out = self.run("run-shell", "true", ";", "list-panes", "-a", "-F", PANE_FORMAT)
        except TmuxNoServer:
            return []
        return [_pane_info(line) for line in out.splitlines() if line]

    def has_pane(self, pane_id: str) -> bool:
        check_pane_id(pane_id)
        try:
            return pane_id in self.run("list-panes", "-a", "-F", "#{pane_id}").split()
        except TmuxNoServer:
            return False

    def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        """Screen text (plus up to `scrollback_lines` of history) and cursor, from one tmux invocation."""
        check_pane_id(pane_id)
        if scrollback_lines < 0:
            raise TmuxInputError(f"scrollback_lines must be >= 0, got {scrollback_lines}")
        start = ["-S", f"-{scrollback_lines}"] if scrollback_lines else []
        # capture-pane first: display-message does not fail on a missing pane, capture-pane does, and a
        # failing command stops the sequence. Both run in one server loop turn, so they agree.
        out = self.run(
            "capture-pane",
            "-p",
            "-t",
            pane_id,
            *start,
            ";",
            "display-message",
            "-p",
            "-t",
            pane_id,
            CAPTURE_META,
        )
        body, _, meta = out.removesuffix("\n").rpartition("\n")
        x, y, width, height = (int(v) for v in meta.split())
        # the body lost its last newline to the partition: give it back, so a screen whose last row is
        # blank (OpenCode's) is not read one row short (its cursor row one off, its composer unknown)
        return Capture(text=body + "\n", cursor=(x, y), width=width, height=height)

    # --- input ------------------------------------------------------------------------------------

    def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:
        """Paste `text` literally (bracketed if the app enabled it); each newline arrives as Enter.

        With `submit_after`, the same tmux call has the server owe this paste its Enter: it stores a
        fresh token in the pane's `@connect-typing` option and schedules a fallback Enter that many
        seconds later (`run-shell -b -C -d`, tmux >= 3.2), pressed only if the option still holds that
        token. Returns the token, for :meth:`enter_once` (the early Enter). Once tmux has the call, the
        Enter follows even if this process dies, so connect never leaves its own text unsent in a
        composer. Without `submit_after` the option is unset: no Enter owed for an earlier paste is
        pressed after this one."""
        check_pane_id(pane_id)
        if submit_after is not None and not 0 <= submit_after <= 10:
            raise TmuxInputError(f"submit_after must be between 0 and 10 seconds, got {submit_after}")
        if not isinstance(text, str) or not text:
            raise TmuxInputError("paste text must be a non-empty string")
        if "\x00" in text:
            raise TmuxInputError("paste text contains a NUL byte")
        token = secrets.token_hex(6)
        buffer = f"connect-{os.getpid()}-{token}"
        if submit_after is None:
            owe: list[str] = ["set-option", "-p", "-u", "-t", pane_id, TYPING_OPTION]
            fallback: list[str] = []
        else:
            owe = ["set-option", "-p", "-t", pane_id, TYPING_OPTION, token]
            # run-shell expands formats in its command when it is called: `##{` keeps the guard's
            # `#{` for if-shell, which evaluates it when the timer fires.
            guarded = _guarded_enter(pane_id, token).replace("#{", "##{")
            fallback = [";", "run-shell", "-b", "-C", "-d", f"{submit_after:.3f}", guarded]
        try:
            self.run(
                "load-buffer",
                "-b",
                buffer,
                "-",
                ";",
                "paste-buffer",
                "-p",
                "-d",
                "-b",
                buffer,
                "-t",
                pane_id,
                ";",
                *owe,
                *fallback,
                stdin=text.encode("utf-8"),
            )
        except TmuxError:
            self._delete_buffer(buffer)
            raise
        return token if submit_after is not None else None

    def enter_once(self, pane_id: str, token: str) -> None:
        """Press the Enter that the paste with this token owes, unless it was pressed already (by an
        earlier call or the server's fallback) or a later paste took its place: one tmux command
        that checks and clears the pane's `@connect-typing` option, so exactly one Enter is pressed.
        A pane that is gone gets nothing (no error: the confirmation finds out)."""
        check_pane_id(pane_id)
        if not re.fullmatch(r"[0-9a-f]{12}", token):
            raise TmuxInputError(f"not a paste token: {token!r}")
        self.run(*shlex.split(_guarded_enter(pane_id, token)))

    def _delete_buffer(self, buffer: str) -> None:
        with contextlib.suppress(TmuxError):  # already gone (pasted and deleted, or never loaded)
            self.run("delete-buffer", "-b", buffer)

    def press_enter(self, pane_id: str) -> None:
        self.run("send-keys", "-t", check_pane_id(pane_id), "Enter")

    def send_named_keys(self, pane_id: str, keys: Sequence[str]) -> None:
        """Press tmux named keys in order (control's send_keys; the core allows only NAMED_KEYS)."""
        if not keys or any(not isinstance(k, str) or k not in NAMED_KEYS for k in keys):
            raise TmuxInputError(f"only named keys may be pressed, got {list(keys)!r}")
        self.run("send-keys", "-t", check_pane_id(pane_id), *keys)

    # --- options ----------------------------------------------------------------------------------

    def get_pane_option(self, pane_id: str, name: str) -> str | None:
        """The pane's own value of an option, or None if the pane does not set it (it inherits)."""
        check_pane_id(pane_id)
        _check_option_name(name)
        try:
            out = self.run("show-options", "-p", "-v", "-t", pane_id, name)
        except TmuxError as exc:
            if name.startswith("@") and str(exc).startswith("invalid option"):
                return None  # a user option that was never set
            raise
        # Unset prints nothing; a value (even an empty one) prints the value and a newline.
        return out.removesuffix("\n") if out else None

    def set_pane_option(self, pane_id: str, name: str, value: str | None) -> None:
        """Set the pane's own value, or unset it (None) so the pane inherits again."""
        check_pane_id(pane_id)
        _check_option_name(name)
        if value is None:
            self.run("set-option", "-p", "-u", "-t", pane_id, name)
        else:
            self.run("set-option", "-p", "-t", pane_id, "--", name, _arg(value, "option value"))

    # --- processes --------------------------------------------------------------------------------

    def respawn(
        self, pane_id: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], *, kill: bool = False
    ) -> None:
        """Run argv in the (dead, unless kill=True) pane in place; the pane id stays, the pane pid changes."""
        check_pane_id(pane_id)
        self._launch(["respawn-pane", *(["-k"] if kill else []), "-t", pane_id], argv, cwd, env)

    def new_window(self, session: str, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> str:
        """Open a background window in `session` (id `$N` or name) running argv; return its pane id."""
        target = _session_target(session) + ":"
        return self._launch(["new-window", "-d", "-P", "-F", "#{pane_id}", "-t", target], argv, cwd, env)

    def new_session(
        self,
        name: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        *,
        width: int = 200,
        height: int = 50,
    ) -> str:
        """Create a detached session (starting the server if needed) running argv; return its pane id."""
        if not name or ":" in name or "." in name:
            raise TmuxInputError(f"not a valid session name: {name!r}")
        size = ["-x", str(width), "-y", str(height)]
        head = ["new-session", "-d", "-s", _literal(name, "session name"), *size, "-P", "-F", "#{pane_id}"]
        return self._launch(head, argv, cwd, env)

    def _launch(self, head: list[str], argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> str:
        if not os.path.isdir(cwd):
            raise TmuxInputError(f"working directory does not exist: {cwd!r}")
        # tmux expands `-c` as a format (`#(cmd)` runs cmd): the directory goes there with `#` doubled,
        # and the launcher itself changes into it (`cd --`), so the process starts exactly there.
        script = self.write_launcher(argv, env, cwd=cwd)
        try:
            out = self.run(*head, "-c", _literal(cwd, "working directory"), "--", "/bin/sh", str(script))
        except BaseException:
            script.unlink(missing_ok=True)
            raise
        return out.strip()

    def write_launcher(self, argv: Sequence[str], env: Mapping[str, str], *, cwd: str | None = None) -> Path:
        """A 0700 script that deletes itself, changes into cwd (if given), exports env and execs argv;
        only its path goes on argv."""
        if not argv or not all(isinstance(a, str) and a and "\x00" not in a for a in argv):
            raise TmuxInputError("argv must be a non-empty list of non-empty strings without NUL")
        for key, value in env.items():
            if not ENV_NAME.match(key):
                raise TmuxInputError(f"not a valid environment variable name: {key!r}")
            if "\x00" in value:
                raise TmuxInputError(f"environment value of {key} contains a NUL byte")
        directory = self.launcher_dir()
        path = directory / f"launch-{secrets.token_hex(8)}.sh"
        lines = [
            "#!/bin/sh",
            f"rm -f -- {shlex.quote(str(path))}",
            *([f"cd -- {shlex.quote(cwd)} || exit 1"] if cwd is not None else []),
            *(f"export {key}={shlex.quote(value)}" for key, value in env.items()),
            "exec " + " ".join(shlex.quote(a) for a in argv),
        ]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def launcher_dir(self) -> Path:
        """The private launcher directory, created 0700; refused if anyone else could read or swap it."""
        base, directory = self._launcher_base, self._launcher_base / "launch"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        for d, forbidden in ((base, 0o022), (directory, 0o077)):
            st = d.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & forbidden:
                raise TmuxError(f"launcher directory {d} must be a directory owned by this user, mode 0700")
        return directory

    def remove_stale_launchers(self, older_than: float = 60.0) -> int:
        """Delete launcher scripts older than `older_than` seconds (a launch that never ran); run at start."""
        cutoff = time.time() - older_than
        removed = 0
        for path in self.launcher_dir().glob("launch-*.sh"):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
        return removed

    def kill_pane(self, pane_id: str) -> None:
        self.run("kill-pane", "-t", check_pane_id(pane_id))

    def reap(self) -> None:
        """Make the server reap children whose exit tmux 3.3a missed (pane_dead=1, empty status)."""
        self.run("run-shell", "true")


def _guarded_enter(pane_id: str, token: str) -> str:
    """The tmux command that presses the Enter a paste owes: only while the pane's option holds the
    paste's token, and it clears the option in the same command (tmux runs it without interruption).
    The condition names the pane too: if-shell does not fail on a missing target but evaluates the
    format in another pane's context (tmux 3.3a), so for a pane that is gone it is simply false."""
    enter = f"send-keys -t {pane_id} Enter ; set-option -p -u -t {pane_id} {TYPING_OPTION}"
    owed = f"#{{&&:#{{==:#{{pane_id}},{pane_id}}},#{{==:#{{{TYPING_OPTION}}},{token}}}}}"
    return f"if-shell -F -t {pane_id} '{owed}' '{enter}'"


def _check_option_name(name: str) -> None:
    if not isinstance(name, str) or not OPTION_NAME.match(name):
        raise TmuxInputError(f"not a tmux option name: {name!r}")


def _default_launcher_base() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "connectd"
    return Path(tempfile.gettempdir()) / f"connectd-{os.getuid()}"


def _int_or_none(value: str) -> int | None:
    return int(value) if value else None


def _pane_info(line: str) -> PaneInfo:
    values = dict(zip((name for name, _ in PANE_FIELDS), line.split(FIELD_SEP), strict=True))
    dead = values["dead"] == "1"
    server_pid = int(values["server_pid"])
    pane_pid = _int_or_none(values["pane_pid"])
    start = None
    if pane_pid is not None and not dead:
        proc = procfs.read_stat(pane_pid)
        # A pane's process is a child of the server; anything else is a reused pid.
        if proc is not None and proc.ppid == server_pid:
            start = proc.start_time
    return PaneInfo(
        server_pid=server_pid,
        server_start_time=int(values["server_start_time"]),
        session_id=values["session_id"],
        window_id=values["window_id"],
        window_index=int(values["window_index"]),
        pane_id=values["pane_id"],
        pane_pid=pane_pid,
        dead=dead,
        dead_status=_int_or_none(values["dead_status"]),
        width=int(values["width"]),
        height=int(values["height"]),
        cursor_x=int(values["cursor_x"]),
        cursor_y=int(values["cursor_y"]),
        session_name=values["session_name"],
        title=values["title"],
        current_command=values["current_command"],
        current_path=values["current_path"],
        process_start_time=start,
        activity=_int_or_none(values["activity"]) or 0,
    )


class TmuxAdapter:
    """The async adapter the daemon uses: each call runs the blocking one in a worker thread.

    `pane_lock(pane_id)` is the pane's send lock (the linearization point of delivery and revocation);
    hold it around `paste_text` / `press_enter` / `send_exit_command`.
    """

    def __init__(
        self,
        socket_name: str | None = None,
        socket_path: str | None = None,
        *,
        config_file: str | None = None,
        launcher_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.sync = SyncTmux(socket_name, socket_path, config_file=config_file, launcher_dir=launcher_dir)
        self._locks: dict[str, anyio.Lock] = {}
        #: Entered around every ``respawn-pane``: the daemon's control-mode watcher detaches its readers
        #: there (:meth:`connectd.tmux.control_mode.ControlModeWatcher.detached`; tmux 3.3a crashes when a
        #: pane is respawned while a control client lags behind its output: docs/compatibility.md).
        self.respawning: Callable[[], contextlib.AbstractAsyncContextManager[Any]] = contextlib.nullcontext

    @property
    def argv(self) -> tuple[str, ...]:
        """`tmux -u` plus the socket and config flags, for callers that spawn tmux themselves."""
        return self.sync.argv

    def pane_lock(self, pane_id: str) -> anyio.Lock:
        """The one send lock of a pane (created on first use; pane ids are never reused by a server)."""
        check_pane_id(pane_id)
        return self._locks.setdefault(pane_id, anyio.Lock())

    def forget_pane_locks(self, live_pane_ids: set[str]) -> None:
        """Drop the locks of panes that no longer exist, unless held or awaited."""
        for pane_id, lock in list(self._locks.items()):
            stats = lock.statistics()
            if pane_id not in live_pane_ids and not stats.locked and not stats.tasks_waiting:
                del self._locks[pane_id]

    async def _call(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn)

    async def server_running(self) -> bool:
        return await self._call(self.sync.server_running)

    async def list_sessions(self) -> list[SessionInfo]:
        return await self._call(self.sync.list_sessions)

    async def list_panes(self) -> list[PaneInfo]:
        return await self._call(self.sync.list_panes)

    async def has_pane(self, pane_id: str) -> bool:
        return await self._call(partial(self.sync.has_pane, pane_id))

    async def capture(self, pane_id: str, scrollback_lines: int = 0) -> Capture:
        return await self._call(partial(self.sync.capture, pane_id, scrollback_lines))

    async def paste_text(self, pane_id: str, text: str, *, submit_after: float | None = None) -> str | None:
        return await self._call(partial(self.sync.paste_text, pane_id, text, submit_after=submit_after))

    async def enter_once(self, pane_id: str, token: str) -> None:
        await self._call(partial(self.sync.enter_once, pane_id, token))

    async def press_enter(self, pane_id: str) -> None:
        await self._call(partial(self.sync.press_enter, pane_id))

    async def send_named_keys(self, pane_id: str, keys: Sequence[str]) -> None:
        await self._call(partial(self.sync.send_named_keys, pane_id, tuple(keys)))

    async def send_exit_command(self, pane_id: str, command: str, *, settle: float = 0.4) -> None:
        """Type the harness's exit command and submit it the way a message is submitted: the paste has
        the tmux server owe its Enter (``submit_after``), and the early Enter after ``settle`` is that
        same Enter (:meth:`enter_once`). A failing early Enter, or a daemon gone between the two, never
        leaves the exit command as a draft in the composer: the server presses the Enter owed."""
        token = await self.paste_text(pane_id, command, submit_after=settle)
        await anyio.sleep(settle)
        if token is None:  # pragma: no cover - paste_text returns a token whenever submit_after is given
            return
        try:
            await self.enter_once(pane_id, token)
        except TmuxError as exc:  # the server owes this Enter: it presses it once settle has passed
            log.warning("the early Enter of the exit command in %s failed (%s): the Enter owed follows", pane_id, exc)

    async def get_pane_option(self, pane_id: str, name: str) -> str | None:
        return await self._call(partial(self.sync.get_pane_option, pane_id, name))

    async def set_pane_option(self, pane_id: str, name: str, value: str | None) -> None:
        await self._call(partial(self.sync.set_pane_option, pane_id, name, value))

    async def respawn(
        self, pane_id: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], *, kill: bool = False
    ) -> None:
        async with self.respawning():
            await self._call(partial(self.sync.respawn, pane_id, argv, cwd, env, kill=kill))

    async def new_window(self, session: str, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> str:
        return await self._call(partial(self.sync.new_window, session, argv, cwd, env))

    async def new_session(
        self,
        name: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        *,
        width: int = 200,
        height: int = 50,
    ) -> str:
        return await self._call(
            partial(self.sync.new_session, name, argv, cwd, env, width=width, height=height)
        )

    async def kill_pane(self, pane_id: str) -> None:
        await self._call(partial(self.sync.kill_pane, pane_id))

    async def reap(self) -> None:
        await self._call(self.sync.reap)
