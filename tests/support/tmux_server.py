"""A private tmux server for integration tests: `tmux -L <unique name> -f /dev/null`, killed at teardown.

Use it as a context manager or through `tmux_server_fixture` in a pytest fixture:

    @pytest.fixture(scope="module")
    def tmux_server() -> Iterator[TmuxServer]:
        yield from tmux_server_fixture()

The server never reads the user's configuration, never touches the user's default server, and is
killed (then SIGKILLed if it lingers) even when a test fails.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from connectd.tmux.procfs import alive

T = TypeVar("T")

#: The runner's terminal size variables, kept out of every test tmux server (see TmuxServer.env).
RUNNER_SIZE = ("COLUMNS", "LINES")


class TmuxServer:
    def __init__(self, prefix: str = "connect-test", *, tmux_bin: str = "tmux") -> None:
        self.socket_name = f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"
        self.argv: list[str] = [tmux_bin, "-u", "-L", self.socket_name, "-f", "/dev/null"]
        self.server_pid: int | None = None
        # Clients must not think they are nested in the developer's own tmux; and the server (whose
        # environment every pane inherits) must not pass on the runner's COLUMNS/LINES (pytest-xdist
        # sets 80x24 in its workers), or a program sizes itself by them instead of by its pane.
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", *RUNNER_SIZE)}

    def __enter__(self) -> TmuxServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    # --- running tmux -----------------------------------------------------------------------------

    def tmux(self, *args: str, stdin: bytes | None = None, check: bool = True) -> str:
        """Run `tmux -L <name> -f /dev/null ARGS`; return stdout; raise on failure if check."""
        proc = subprocess.run(
            [*self.argv, *args], input=stdin or b"", capture_output=True, env=self.env, timeout=30
        )
        if check and (proc.returncode != 0 or proc.stderr):
            raise RuntimeError(f"tmux {shlex.join(args)} failed: {proc.stderr.decode(errors='replace')}")
        return proc.stdout.decode("utf-8", "replace")

    def new_session(
        self,
        name: str = "main",
        command: Sequence[str] | None = None,
        *,
        width: int = 120,
        height: int = 40,
        cwd: str | None = None,
    ) -> str:
        """A detached session (the first one starts the server); returns its first pane id."""
        args = [
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            str(width),
            "-y",
            str(height),
            "-P",
            "-F",
            "#{pane_id}",
        ]
        if cwd:
            args += ["-c", cwd]
        pane = self.tmux(*args, *(["--", *command] if command else [])).strip()
        if self.server_pid is None:
            self.server_pid = int(self.tmux("display-message", "-p", "#{pid}").strip())
        return pane

    def new_window(self, session: str, command: Sequence[str] | None = None) -> str:
        args = ["new-window", "-d", "-t", f"={session}:", "-P", "-F", "#{pane_id}"]
        return self.tmux(*args, *(["--", *command] if command else [])).strip()

    def display(self, pane_id: str, fmt: str) -> str:
        return self.tmux("display-message", "-p", "-t", pane_id, fmt).strip()

    def pane_pid(self, pane_id: str) -> int:
        return int(self.display(pane_id, "#{pane_pid}"))

    def capture(self, pane_id: str) -> str:
        return self.tmux("capture-pane", "-p", "-t", pane_id)

    def send_keys(self, pane_id: str, *keys: str) -> None:
        self.tmux("send-keys", "-t", pane_id, *keys)

    def running(self) -> bool:
        """Whether the server answers on its socket."""
        return (
            subprocess.run([*self.argv, "list-sessions"], capture_output=True, env=self.env).returncode == 0
        )

    def adapter(self, **kwargs: Any) -> Any:
        """A `connectd.tmux.adapter.TmuxAdapter` on this server (config file /dev/null)."""
        from connectd.tmux.adapter import TmuxAdapter

        return TmuxAdapter(socket_name=self.socket_name, config_file="/dev/null", **kwargs)

    # --- waiting and teardown ---------------------------------------------------------------------

    @staticmethod
    def wait_for(
        probe: Callable[[], T | None],
        *,
        timeout: float = 10.0,
        interval: float = 0.02,
        what: str = "condition",
    ) -> T:
        """Poll `probe` until it returns a truthy value and return it; fail with `what` after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(interval)

    def _pid_alive(self) -> bool:
        """Whether the server process still runs (a zombie waiting for init to reap it has exited)."""
        return self.server_pid is not None and alive(self.server_pid)

    def kill(self) -> None:
        """kill-server, then SIGKILL the server pid if it lingers, then remove a stale socket file."""
        out = self.tmux("display-message", "-p", "#{pid}", check=False).strip()
        if out.isdigit():  # the server may have been started by the code under test
            self.server_pid = int(out)
        self.tmux("kill-server", check=False)
        deadline = time.monotonic() + 5
        while self._pid_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._pid_alive() and self.server_pid is not None:
            os.kill(self.server_pid, signal.SIGKILL)
        tmpdir = os.environ.get("TMUX_TMPDIR", "/tmp")
        Path(tmpdir, f"tmux-{os.getuid()}", self.socket_name).unlink(missing_ok=True)


def tmux_server_fixture(prefix: str = "connect-test") -> Iterator[TmuxServer]:
    """Body of a pytest fixture: `yield from tmux_server_fixture()`."""
    server = TmuxServer(prefix)
    try:
        yield server
    finally:
        server.kill()
