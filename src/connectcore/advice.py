"""What connect tells a person who is stuck, and the command that gets them going (issue 23).

Each piece of advice is a problem in one line and, when something can be done about it, one ``fix:``
line naming the command to run (as ``connectd doctor`` words its checks). The daemon and the CLI read
the facts (is a tmux server running, which harnesses are on PATH, who holds the port, did connect
start this pane) and print what these functions answer; the choice of words and of fix is made here.

Rules:

- ``connectd run`` starts the isolated demo when asked (``--demo``) or when no tmux server runs;
  otherwise it serves the person's fleet, as ``connectd serve``. It says which, and how to get the
  other.
- A daemon with no tmux server to watch, or a machine with no harness on PATH, has nothing to show:
  ``serve`` warns at start, ``agents`` when it lists nothing, ``doctor`` as a warning.
- A port in use, or a second daemon on one data directory, is refused in one line with its fix.
- A client command with no daemon on its data directory: when a connectd on the port serves another
  data directory, the fix names that directory; when another program holds the port, a new daemon
  needs another port; else start one.
- An agent connected in place (its process holds no endpoint) gets its tools when connect relaunches
  it. Connect started it (a launch record): restart-to-connect does that. Connect did not (started by
  hand): restart-to-connect cannot, and the person runs ``connectd launch --here`` in its pane.

Commands are written with ``cli``, the way to run connectd that works where the advice is read
(:func:`cli_command`): ``connectd`` when that is on PATH, else the path of the running script.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from connectcore.releases import VERIFIED

#: The harnesses a person can run under connect (their programs' names on PATH), the first one the
#: one the advice installs.
HARNESSES: tuple[str, ...] = tuple(VERIFIED)


def counted(n: int, noun: str, plural: str = "") -> str:
    """``n`` and the noun, singular for one (``1 pane``, ``3 panes``, ``2 entries``): every count the
    CLI prints goes through here. ``plural`` when the noun does not take an ``s``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


@dataclass(frozen=True)
class Advice:
    """A problem in one line, and the command (or step) that fixes it ("" when nothing does)."""

    problem: str
    fix: str = ""
    about: str = ""  # what it is about, as `connectd doctor` names its checks ("tmux server", "harnesses")

    def lines(self, indent: str = "") -> list[str]:
        return [self.problem, *([f"{indent}fix: {self.fix}"] if self.fix else [])]


def cli_command(*, running: str, on_path: str | None, python: str) -> str:
    """How to run connectd again, for a command printed to the person.

    ``running``: the resolved path of the program running now (``sys.argv[0]``); ``on_path``: the
    resolved path ``connectd`` finds on PATH (None: not there); ``python``: this interpreter.
    """
    if on_path is not None and on_path == running:
        return "connectd"
    if running.rsplit("/", 1)[-1] == "connectd":
        return shlex.quote(running)
    return f"{shlex.quote(python)} -m connectd.cli"


def login_command(cli: str, data_dir: str, default_data_dir: str) -> str:
    """The command the owner page's login screen shows, exactly as it runs on the daemon's machine:
    ``--data-dir`` only when the daemon does not use the default one (issue 23 item 8)."""
    if data_dir == default_data_dir:
        return f"{cli} token"
    return f"{cli} token --data-dir {shlex.quote(data_dir)}"


# --- connectd run -------------------------------------------------------------------------------------


class RunMode(StrEnum):
    SERVE = "serve"  # the person's own fleet, on their tmux server
    DEMO = "demo"  # an isolated demo fleet on its own tmux server


def run_mode(*, demo_asked: bool, tmux_server_running: bool) -> RunMode:
    return RunMode.DEMO if demo_asked or not tmux_server_running else RunMode.SERVE


def run_mode_line(mode: RunMode, *, tmux_server_running: bool, cli: str = "connectd") -> str:
    """What ``connectd run`` says before it starts: which mode, why, and how to get the other."""
    if mode is RunMode.SERVE:
        return (
            "connectd run: a tmux server is running, so this serves your own fleet (as `connectd serve`); "
            f"for the isolated demo instead: `{cli} run --demo` (or `make demo`)"
        )
    if tmux_server_running:
        return "connectd run --demo: an isolated demo fleet on its own tmux server (tmux -L connect-demo); your tmux server is left alone"
    return (
        "connectd run: no tmux server is running, so this starts an isolated demo fleet on its own tmux server "
        f"(tmux -L connect-demo); to serve your own fleet, start tmux and run `{cli} run` again"
    )


# --- starting the daemon ------------------------------------------------------------------------------


def port_in_use(port: int, why: str = "", cli: str = "connectd") -> Advice:
    detail = f" ({why})" if why else ""
    return Advice(
        f"127.0.0.1:{port} is in use by another program{detail}",
        f"see who holds it (`ss -ltnp 'sport = :{port}'`) or run connectd with another --port (`{cli} serve --port {port + 1}`)",
    )


def daemon_running(data_dir: str, cli: str = "connectd") -> Advice:
    return Advice(
        f"another connectd is already running on {data_dir}",
        f"use that one (`{cli} agents --data-dir {shlex.quote(data_dir)}`), or stop it first; "
        "a second daemon needs its own --data-dir and --port",
    )


def unusable_secret(path: str, why: str) -> Advice:
    """A secret file of the data directory the daemon cannot use: removed, a new one is made at start."""
    return Advice(
        f"{path} {why}",
        f"rm {shlex.quote(path)}  (the next start makes a new one; page logins and links made with the "
        "old one stop working)",
    )


def fleet_warnings(
    *, tmux_server_running: bool, harnesses_on_path: Collection[str], cli: str = "connectd"
) -> tuple[Advice, ...]:
    """What leaves a daemon with nothing to show: no tmux server to watch, no harness to run."""
    found: list[Advice] = []
    if not tmux_server_running:
        found.append(
            Advice(
                "no tmux server is running: connectd sees agents only in tmux panes, so there is nothing to show yet",
                f"start tmux (`tmux new-session -s main`) and run your agents in its panes, or `{cli} launch claude` "
                f"once it runs; `{cli} run --demo` shows a demo fleet",
                "tmux server",
            )
        )
    if not any(name in harnesses_on_path for name in HARNESSES):
        package, verified = VERIFIED[HARNESSES[0]]
        found.append(
            Advice(
                f"no agent harness on PATH ({', '.join(HARNESSES)}): there is no agent to launch or connect",
                f"install one, e.g. `npm install -g {package}@{verified[-1]}` (a verified release; see docs/compatibility.md)",
                "harnesses",
            )
        )
    return tuple(found)


def no_tmux_session(cli: str = "connectd") -> Advice:
    """``launch`` with no tmux session to open a window in."""
    return Advice(
        "no tmux session to open a window in",
        f"start tmux (`tmux new-session -d -s main`), or run the agent in your own tmux pane: `{cli} launch --here LAUNCHER`",
    )


# --- a client command with no daemon ----------------------------------------------------------------


def no_daemon(data_dir: str, port: int, *, served_elsewhere: str | None, port_taken: bool, cli: str = "connectd") -> Advice:
    """A client command found no daemon on ``data_dir``.

    ``served_elsewhere``: the data directory of a connectd of ours listening on ``port`` (None: none);
    ``port_taken``: something listens on ``port``.
    """
    problem = f"no daemon is running on {data_dir}"
    if served_elsewhere is not None and served_elsewhere != data_dir:
        quoted = shlex.quote(served_elsewhere)
        return Advice(
            f"{problem}; the connectd on port {port} serves {served_elsewhere}",
            f"point at that one: `{cli} --data-dir {quoted} ...` (or `export CONNECT_DATA_DIR={quoted}`)",
        )
    if port_taken:
        return Advice(
            f"{problem}, and another program holds port {port}",
            f"start one on another port: `{cli} serve --data-dir {shlex.quote(data_dir)} --port {port + 1}`",
        )
    return Advice(problem, f"start it: `{cli} serve --data-dir {shlex.quote(data_dir)}` (or `make run` in a checkout)")


def token_withheld(data_dir: str, port: int, why: str, cli: str = "connectd") -> Advice:
    """The listener on the recorded port is not the recorded daemon (:mod:`connectcore.listener`)."""
    return Advice(
        f"refusing to send the owner token to 127.0.0.1:{port}: {why}",
        f"if the daemon is not running, start it (`{cli} serve --data-dir {shlex.quote(data_dir)}`); "
        f"`{cli} doctor --data-dir {shlex.quote(data_dir)}` says what holds the port",
    )


def unreachable(data_dir: str, url: str, why: str, cli: str = "connectd") -> Advice:
    return Advice(
        f"cannot reach the daemon at {url}: {why}",
        f"see whether it runs: `{cli} doctor --data-dir {shlex.quote(data_dir)}`",
    )


# --- agents connected in place ------------------------------------------------------------------------


def relaunch_here(harness: str | None, session_id: str | None, cli: str = "connectd") -> str:
    """The command that runs a hand-started agent under connect, in its own pane, resuming its session."""
    launcher = harness or "LAUNCHER"
    session = f" --session {shlex.quote(session_id)}" if session_id else " --session SESSION_ID"
    return f"{cli} launch --here {shlex.quote(launcher)}{session}"


def receive_only_note(*, started_by_connect: bool, harness: str | None = None, session_id: str | None = None) -> str:
    """What the page and the CLI say of an agent connected in place (no endpoint in its process)."""
    if started_by_connect:
        return "connected: receives now; its tools arrive when connect relaunches it (restart-to-connect)"
    return (
        "connected: receives now; connect did not start it, so its tools arrive once it runs under connect: "
        f"quit it and run `{relaunch_here(harness, session_id)}` in its pane"
    )


def hand_started_restart_refusal(pane_id: str, harness: str | None = None, session_id: str | None = None) -> Advice:
    """restart-to-connect on a pane connect did not start: why not, and what to do instead."""
    return Advice(
        f"{pane_id} was not started by connectd, so restart-to-connect cannot relaunch it",
        f"quit the agent and run `{relaunch_here(harness, session_id)}` in that pane: it then runs under connect, tools included",
    )
