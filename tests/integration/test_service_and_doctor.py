"""Issue 14, item 4: ``connectd service`` writes and checks a systemd user unit (without needing systemd
to run here), and ``connectd doctor`` says what is wrong with this machine and how to fix it."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path

import pytest

from connectd import verified as compat
from connectd.cli.main import main
from tests.support.daemon import DaemonProcess
from tests.support.fixtures import free_port
from tests.support.harnesses import PINNED
from tests.support.tmux_server import TmuxServer


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().out


def fake_program(bin_dir: Path, name: str, script: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


# --- service ---------------------------------------------------------------------------------------


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "systemd" / "user" / "connectd.service"


def test_service_install_writes_a_user_unit_and_says_when_systemd_is_away(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    no_bus = fake_program(tmp_path / "bin", "systemctl", 'echo "Failed to connect to bus: No medium found" >&2; exit 1\n')
    monkeypatch.setenv("CONNECTD_SYSTEMCTL", str(no_bus))
    data = tmp_path / "data"
    status, out = run(capsys, "service", "install", "--data-dir", str(data), "--port", "7979")
    assert status == 0 and f"wrote {config}" in out
    assert "systemctl --user is unavailable (Failed to connect to bus" in out and "enable --now connectd" in out
    unit = config.read_text()
    assert "\nRestart=on-failure\n" in unit and "\nWantedBy=default.target\n" in unit
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(f"-m connectd.cli serve --data-dir {data} --port 7979")
    assert stat.S_IMODE(config.stat().st_mode) == 0o644

    status, out = run(capsys, "service", "status", "--data-dir", str(data), "--port", "7979")
    assert status == 0 and f"unit {config}: ok" in out and "cannot tell whether it is enabled or running" in out

    config.write_text(unit.replace("Restart=on-failure\n", ""))
    status, out = run(capsys, "service", "status", "--data-dir", str(data), "--port", "7979")
    assert status == 1 and "lacks Restart=on-failure" in out and "fix: run `connectd service install` again" in out
    status, out = run(capsys, "service", "status", "--data-dir", str(data), "--port", "8080")
    assert status == 1 and "differs from what `connectd service install` writes now" in out

    status, out = run(capsys, "service", "uninstall")
    assert status == 0 and f"removed {config}" in out and not config.exists()
    status, out = run(capsys, "service", "status", "--data-dir", str(data))
    assert status == 1 and "not installed" in out


def test_service_install_enables_and_starts_it_through_systemctl_user(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    ctl = fake_program(
        tmp_path / "bin", "systemctl",
        f'echo "$@" >> {calls}\n'
        'case "$2" in is-enabled) echo enabled;; is-active) echo active;; esac\nexit 0\n',
    )
    monkeypatch.setenv("CONNECTD_SYSTEMCTL", str(ctl))
    data = tmp_path / "data"
    status, out = run(capsys, "service", "install", "--data-dir", str(data))
    assert status == 0 and "enabled and started" in out
    status, out = run(capsys, "service", "status", "--data-dir", str(data))
    assert status == 0 and "systemd: enabled, active" in out
    run(capsys, "service", "uninstall")
    assert calls.read_text().splitlines() == [
        "--user show-environment", "--user daemon-reload", "--user enable --now connectd.service",
        "--user show-environment", "--user is-enabled connectd.service", "--user is-active connectd.service",
        "--user show-environment", "--user disable --now connectd.service", "--user daemon-reload",
    ]


# --- doctor ----------------------------------------------------------------------------------------


def doctor(capsys: pytest.CaptureFixture[str], data: Path, port: int) -> tuple[int, dict[str, dict[str, str]]]:
    status, out = run(capsys, "doctor", "--json", "--data-dir", str(data), "--port", str(port))
    answer = json.loads(out)
    assert answer["ok"] is (status == 0)
    return status, {c["name"]: c for c in answer["checks"]}


def test_doctor_passes_a_ready_machine_and_names_a_loose_data_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    port = free_port()
    status, checks = doctor(capsys, data, port)
    assert status == 0, checks
    assert checks["tmux"]["status"] == "ok" and "tmux 3." in checks["tmux"]["detail"]
    assert checks["data directory"]["status"] == "ok" and checks["port"]["status"] == "ok"
    assert checks["daemon"]["status"] == "warn" and "connectd serve" in checks["daemon"]["fix"]
    assert checks["federation"]["status"] == "ok" and checks["federation"]["detail"].startswith("not configured")

    data.chmod(0o755)
    (data / "owner_token").write_text("co_x\n")
    (data / "owner_token").chmod(0o644)
    status, checks = doctor(capsys, data, port)
    check = checks["data directory"]
    assert status == 1 and check["status"] == "fail"
    assert "is 0755, not 0700" in check["detail"] and "owner_token is 0644" in check["detail"]
    assert check["fix"] == f"chmod 700 {data} && chmod 600 {data / 'owner_token'}"
    status, text = run(capsys, "doctor", "--data-dir", str(data), "--port", str(port))
    assert status == 1 and "[FAIL] data directory" in text and f"fix: chmod 700 {data}" in text and "1 problem to fix" in text


def test_doctor_names_a_busy_port_a_missing_tmux_and_an_unverified_harness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        status, checks = doctor(capsys, data, port)
    assert status == 1 and checks["port"]["status"] == "fail"
    assert "in use by another program" in checks["port"]["detail"] and "--port" in checks["port"]["fix"]

    bin_dir = tmp_path / "bin"
    old = compat.VERIFIED["claude"][1][-1].rsplit(".", 1)[0] + ".1"  # a release nobody verified
    fake_program(bin_dir, "claude", f'echo "{old} (Claude Code)"\n')
    fake_program(bin_dir, "codex", f'echo "codex-cli {compat.VERIFIED["codex"][1][-1]}"\n')
    monkeypatch.setenv("PATH", str(bin_dir))  # and no tmux
    status, checks = doctor(capsys, data, free_port())
    assert status == 1
    assert checks["tmux"]["status"] == "fail" and "apt-get install -y tmux" in checks["tmux"]["fix"]
    assert checks["claude"]["status"] == "warn" and f"claude {old}" in checks["claude"]["detail"]
    assert "unverified release" in checks["claude"]["detail"] and "messages to it wait" in checks["claude"]["detail"]
    assert checks["codex"]["status"] == "ok" and "a verified release" in checks["codex"]["detail"]

    fake_program(bin_dir, "tmux", 'echo "tmux 2.9"\n')
    _, checks = doctor(capsys, data, free_port())
    assert checks["tmux"]["status"] == "fail" and "older than 3.2" in checks["tmux"]["detail"]


def test_doctor_finds_the_running_daemon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with TmuxServer("connect-doctor") as tmux:
        tmux.new_session("main", width=100, height=30)
        d = DaemonProcess(tmp_path, tmux).start()
        try:
            status, checks = doctor(capsys, d.data_dir, d.port)
        finally:
            d.stop()
    assert checks["daemon"]["status"] == "ok" and f"answers on port {d.port}" in checks["daemon"]["detail"]
    assert checks["port"]["status"] == "ok" and "held by this data directory's daemon" in checks["port"]["detail"]
    assert checks["data directory"]["status"] == "ok" and status == 0, checks


def test_the_verified_releases_include_the_pins_the_tests_run() -> None:
    for name, (package, version) in PINNED.items():
        assert compat.VERIFIED[name][0] == package and version in compat.VERIFIED[name][1]
    assert compat.parse_version("2.1.332 (Claude Code)") == "2.1.332"
    assert compat.parse_version("codex-cli 0.171.0") == "0.171.0" and compat.parse_version("tmux 3.3a") == "3.3a"
