"""``connectd service install|uninstall|status``: run the daemon as a systemd user service.

The unit is ``$XDG_CONFIG_HOME/systemd/user/connectd.service`` (``~/.config/...`` by default). It runs
this installation's own Python (``<python> -m connectd.cli serve``, so a ``pipx``/``uv tool`` install
keeps working after an upgrade), with the data directory and port it was installed with, and
``Restart=on-failure``. The file is written whether or not systemd runs here; ``systemctl --user`` is
then asked to reload, enable and start it, and when it cannot be reached (no user session bus, a
container) the command says so and prints what to run later. ``CONNECTD_SYSTEMCTL`` names another
``systemctl`` (the tests use a stand-in).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

UNIT_NAME = "connectd.service"


def unit_path() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "systemd" / "user" / UNIT_NAME


def unit_text(data_dir: Path, port: int, python: str | None = None) -> str:
    argv = [python or sys.executable, "-m", "connectd.cli", "serve", "--data-dir", str(data_dir), "--port", str(port)]
    return (
        "# Written by `connectd service install`; `connectd service uninstall` removes it.\n"
        "[Unit]\n"
        "Description=connect: opt-in, audited messaging between coding agents in tmux\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={shlex.join(argv)}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        "Environment=PYTHONUNBUFFERED=1\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


@dataclass(frozen=True)
class Systemctl:
    """``systemctl --user``, or why it cannot be used here."""

    path: str | None
    unavailable: str | None

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.path is not None
        return subprocess.run([self.path, "--user", *args], capture_output=True, text=True, timeout=30)


def systemctl() -> Systemctl:
    path = os.environ.get("CONNECTD_SYSTEMCTL") or shutil.which("systemctl")
    if not path or not os.access(path, os.X_OK):
        return Systemctl(None, "systemctl is not installed")
    try:
        probe = subprocess.run([path, "--user", "show-environment"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Systemctl(None, f"systemctl --user did not answer ({exc})")
    if probe.returncode != 0:
        reason = (probe.stderr or probe.stdout).strip().splitlines()
        return Systemctl(None, f"systemctl --user is unavailable ({reason[0] if reason else f'exit {probe.returncode}'})")
    return Systemctl(path, None)


LATER = "systemctl --user daemon-reload && systemctl --user enable --now connectd"


def install(data_dir: Path, port: int, *, start: bool = True) -> tuple[int, list[str]]:
    path = unit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(unit_text(data_dir, port))
    os.chmod(path, 0o644)
    lines = [f"wrote {path} (Restart=on-failure; data in {data_dir}, port {port})"]
    ctl = systemctl()
    if ctl.unavailable:
        return 0, [*lines, f"{ctl.unavailable}: run `{LATER}` in a session where it is"]
    steps = [("daemon-reload",), ("enable", "--now", UNIT_NAME) if start else ("enable", UNIT_NAME)]
    for step in steps:
        done = ctl.run(*step)
        if done.returncode != 0:
            return 1, [*lines, f"systemctl --user {' '.join(step)} failed: {(done.stderr or done.stdout).strip()}"]
    return 0, [*lines, "enabled" + (" and started" if start else "") + "; `connectd service status` checks it"]


def uninstall() -> tuple[int, list[str]]:
    path = unit_path()
    lines: list[str] = []
    ctl = systemctl()
    if ctl.unavailable is None:
        ctl.run("disable", "--now", UNIT_NAME)
    if path.exists():
        path.unlink()
        lines.append(f"removed {path}")
    else:
        lines.append(f"no unit at {path}: nothing to remove")
    if ctl.unavailable is None:
        ctl.run("daemon-reload")
    else:
        lines.append(f"{ctl.unavailable}: if it was enabled elsewhere, run `systemctl --user disable --now connectd`")
    return 0, lines


def status(data_dir: Path, port: int) -> tuple[int, list[str]]:
    """Is the unit there, is it the one install would write (Restart=on-failure, a Python that exists),
    and what does systemd say of it."""
    path = unit_path()
    if not path.exists():
        return 1, [f"not installed: no {path} (run `connectd service install`)"]
    text = path.read_text()
    problems: list[str] = []
    if "\nRestart=on-failure\n" not in text:
        problems.append("the unit lacks Restart=on-failure")
    exec_line = next((line for line in text.splitlines() if line.startswith("ExecStart=")), "")
    argv = shlex.split(exec_line.removeprefix("ExecStart=")) if exec_line else []
    if not argv:
        problems.append("the unit has no ExecStart")
    elif not (os.path.isfile(argv[0]) and os.access(argv[0], os.X_OK)):
        problems.append(f"its Python {argv[0]} is gone (reinstalled elsewhere?)")
    if text != unit_text(data_dir, port):
        problems.append("it differs from what `connectd service install` writes now (data dir, port or Python changed)")
    lines = [f"unit {path}: " + ("ok" if not problems else "; ".join(problems))]
    if problems:
        lines.append("fix: run `connectd service install` again (with the same --data-dir and --port)")
    ctl = systemctl()
    if ctl.unavailable:
        lines.append(f"{ctl.unavailable}: cannot tell whether it is enabled or running")
        return (1 if problems else 0), lines
    enabled = ctl.run("is-enabled", UNIT_NAME).stdout.strip() or "unknown"
    active = ctl.run("is-active", UNIT_NAME).stdout.strip() or "unknown"
    lines.append(f"systemd: {enabled}, {active}")
    if active != "active":
        lines.append("not running: `systemctl --user start connectd`; why it stopped: `journalctl --user -u connectd`")
    return (1 if problems or active != "active" else 0), lines
