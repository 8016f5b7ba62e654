"""``make test``'s first step (scripts/system_deps.py): install what the tests need, or stop naming it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("system_deps", Path(__file__).resolve().parents[2] / "scripts" / "system_deps.py")
assert spec and spec.loader
system_deps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(system_deps)


def test_what_is_missing_is_named() -> None:
    nothing = system_deps.missing(which=lambda name: None, env={}, is_executable=lambda path: False)
    assert nothing == ["tmux", "chromium"]
    everything = system_deps.missing(which=lambda name: f"/usr/bin/{name}", env={}, is_executable=lambda path: True)
    assert everything == []
    elsewhere = system_deps.missing(
        which=lambda name: "/usr/bin/tmux", env={"CONNECT_CHROMIUM": "/opt/c"}, is_executable=lambda path: path == "/opt/c"
    )
    assert elsewhere == []


def test_root_with_apt_installs_and_anyone_else_is_told_the_command() -> None:
    assert system_deps.plan([], root=False, apt=False) == ([], "")
    commands, stop = system_deps.plan(["chromium"], root=True, apt=True)
    assert commands == [["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]] and stop == ""
    commands, stop = system_deps.plan(["tmux", "chromium"], root=False, apt=True)
    assert commands == [] and "sudo apt-get install -y tmux chromium" in stop
    commands, stop = system_deps.plan(["chromium"], root=True, apt=False)
    assert commands == [] and "apt-get install -y chromium" in stop
