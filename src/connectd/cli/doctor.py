"""``connectd doctor``: is this machine ready? Each check says what it found and, when something is
wrong, what to do about it.

Checks: tmux (present, at least :data:`connectd.verified.TMUX_MINIMUM`), the harness releases on PATH
against the verified ones (:data:`connectd.verified.VERIFIED`; an unknown release is a warning: its
messages wait until its screens are read), the port (free, or held by this data directory's daemon),
the data directory (ours, 0700; its secrets 0600), the daemon (answers the owner API) and federation
(not configured, or its NATS server and whether the daemon's bus is connected; when it is, the server's
version, JetStream on and this box's consumer present, read by the daemon through its bus; each pairing
with its fingerprint and state, an active one with when its box was last heard and its directory's
age; each pair request waiting).
A failure makes the exit status 1; warnings do not.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from connectcore import advice
from connectd import verified as compat
from connectd.cli import facts

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def _version_of(program: str) -> tuple[str | None, str]:
    """(the program's version, its banner) from ``program --version`` (tmux: ``-V``)."""
    flag = "-V" if Path(program).name == "tmux" else "--version"
    try:
        out = subprocess.run([program, flag], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    banner = (out.stdout or out.stderr).strip()
    return compat.parse_version(banner), banner


def check_tmux() -> Check:
    path = shutil.which("tmux")
    if path is None:
        return Check("tmux", FAIL, "tmux is not on PATH", "install it: `sudo apt-get install -y tmux` (or your system's package)")
    version, banner = _version_of(path)
    if version is None:
        return Check("tmux", FAIL, f"{path} gave no version ({banner[:80]!r})", "reinstall tmux")
    minimum = ".".join(map(str, compat.TMUX_MINIMUM))
    if compat.version_tuple(version)[:2] < compat.TMUX_MINIMUM:
        return Check("tmux", FAIL, f"tmux {version} at {path} is older than {minimum}", f"upgrade tmux to {minimum} or newer")
    note = "" if version == compat.TMUX_TESTED else f" (tested on {compat.TMUX_TESTED})"
    return Check("tmux", OK, f"tmux {version} at {path}{note}")


def check_harness(harness: str) -> Check:
    package, verified = compat.VERIFIED[harness]
    path = shutil.which(harness)
    listed = ", ".join(verified)
    if path is None:
        return Check(harness, OK, f"not on PATH (needed only to run {harness}; verified: {listed})")
    version, banner = _version_of(path)
    if version is None:
        return Check(harness, WARN, f"{path} gave no version ({banner[:80]!r})", f"reinstall it: `npm install -g {package}@{verified[-1]}`")
    if compat.is_verified(harness, version):
        return Check(harness, OK, f"{harness} {version} at {path}: a verified release")
    return Check(
        harness, WARN,
        f"{harness} {version} at {path} is an unverified release (verified: {listed}): "
        "messages to it wait until its screens are read",
        f"use a verified release (`npm install -g {package}@{verified[-1]}`) or see docs/compatibility.md",
    )


def _daemon_info(data_dir: Path) -> dict[str, object]:
    try:
        info = json.loads((data_dir / "daemon.json").read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def check_port(port: int, data_dir: Path) -> Check:
    info = _daemon_info(data_dir)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            busy = str(exc)
        else:
            return Check("port", OK, f"127.0.0.1:{port} is free for `connectd serve`")
    if info.get("port") == port:
        from connectd.cli.main import listener_refusal

        why = listener_refusal(port, int(str(info.get("pid") or 0)))
        if why is None:
            return Check("port", OK, f"127.0.0.1:{port} is held by this data directory's daemon (pid {info.get('pid')})")
        return Check("port", FAIL, f"127.0.0.1:{port} is held, but not by the daemon daemon.json names: {why}",
                     f"stop whatever listens there (`ss -ltnp 'sport = :{port}'`) or run connectd on another --port")
    busy_advice = advice.port_in_use(port, busy, facts.cli_command())
    return Check("port", FAIL, busy_advice.problem, busy_advice.fix)


def check_data_dir(data_dir: Path) -> Check:
    if not data_dir.exists():
        return Check("data directory", OK, f"{data_dir} does not exist yet (`connectd serve` creates it 0700)")
    try:
        st = data_dir.lstat()
    except OSError as exc:
        return Check("data directory", FAIL, f"{data_dir}: {exc}", "fix the path or pass another --data-dir")
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return Check("data directory", FAIL, f"{data_dir} is not a directory", "pass a directory as --data-dir")
    if st.st_uid != os.getuid():
        return Check("data directory", FAIL, f"{data_dir} belongs to uid {st.st_uid}, not you ({os.getuid()})",
                     f"use your own directory, or `sudo chown -R {os.getuid()} {data_dir}`")
    mode = stat.S_IMODE(st.st_mode)
    problems, fixes = [], []
    if mode != 0o700:
        problems.append(f"{data_dir} is {mode:04o}, not 0700")
        fixes.append(f"chmod 700 {data_dir}")
    for name in ("owner_token", "tunnel_secret", "connect.db", "page_sessions.json"):
        path = data_dir / name
        if path.exists() and stat.S_IMODE(path.lstat().st_mode) & 0o077:
            problems.append(f"{name} is {stat.S_IMODE(path.lstat().st_mode):04o}, readable by others")
            fixes.append(f"chmod 600 {path}")
    if problems:
        return Check("data directory", FAIL, "; ".join(problems), " && ".join(fixes))
    return Check("data directory", OK, f"{data_dir} is yours and 0700")


def check_daemon(data_dir: Path, port: int) -> Check:
    info = _daemon_info(data_dir)
    if not info:
        return Check("daemon", WARN, f"no daemon is running on {data_dir}",
                     f"start it: `connectd serve --data-dir {data_dir}` or `connectd service install`")
    from connectd.cli.main import Client

    try:
        client = Client(data_dir, None)
        agents = client.call("GET", "/api/agents")
    except SystemExit as exc:
        return Check("daemon", FAIL, getattr(exc, "problem", None) or str(exc.code).removeprefix("connectd: "),
                     f"restart it: `connectd serve --data-dir {data_dir}` (or `systemctl --user restart connectd`)")
    where = f"port {client.port}" + ("" if client.port == port else f" (not --port {port})")
    return Check("daemon", OK, f"answers on {where}, pid {client.pid}; {advice.counted(len(agents), 'pane')} in the directory")


def check_fleet() -> list[Check]:
    """Warnings when a daemon would have nothing to show: no tmux server runs (on the default
    socket, the one `connectd serve` watches), no harness is on PATH (:func:`connectcore.advice.fleet_warnings`)."""
    found = advice.fleet_warnings(
        tmux_server_running=facts.tmux_server_running(), harnesses_on_path=facts.harnesses_on_path(), cli=facts.cli_command()
    )
    checks = [Check(a.about, WARN, a.problem, a.fix) for a in found]
    if not any(c.name == "tmux server" for c in checks):
        checks.insert(0, Check("tmux server", OK, "a tmux server is running"))
    return checks


def check_federation(data_dir: Path) -> list[Check]:
    """One line for federation (not configured; configured: the NATS server and whether the running
    daemon's bus is connected, from ``GET /api/pairing/status``) and one per pairing (its name, box,
    fingerprint and state) and per pair request waiting for the person."""
    from connectd.federation import keys
    from connectd.federation.desk import Settings

    try:
        settings = Settings.read(data_dir)
    except keys.BoxKeyError as exc:
        return [Check("federation", FAIL, str(exc), f"fix {data_dir / keys.FEDERATION_FILE} by hand")]
    if settings is None:
        return [Check("federation", OK, "not configured (this box works alone)")]
    where = f"box {settings.name}; NATS {settings.nats}" if settings.nats else f"box {settings.name}; no NATS server named"
    nats_fix = "" if settings.nats else "connectd federate --nats nats://HOST:PORT --creds FILE (a running daemon picks it up)"
    if not _daemon_info(data_dir):
        return [Check("federation", WARN if settings.nats else OK, f"configured: {where} (no daemon running to ask)", nats_fix)]
    from connectd.cli.main import Client

    try:
        client = Client(data_dir, None)
        status = client.call("GET", "/api/pairing/status?checks=1")
        pairings = client.call("GET", "/api/pairing/pairings")
        requests = client.call("GET", "/api/pairing/requests")
    except SystemExit as exc:
        return [Check("federation", WARN, f"configured: {where}; the daemon does not say how it is "
                      f"({getattr(exc, 'problem', None) or exc.code})", "restart the daemon: it reads federation.toml at start")]
    if status.get("nats") != settings.nats:  # the file changed by hand, or a change a reload does not take
        checks = [Check("federation", WARN, f"configured: {where}, but the running daemon's bus uses "
                        f"{status.get('nats') or 'no NATS server'}",
                        "run `connectd federate --nats ...` (or `--off`) again: the daemon takes a change of NATS "
                        "server as it runs; for anything else, restart the daemon: it reads federation.toml at start")]
    elif not settings.nats:
        checks = [Check("federation", OK, f"configured: {where} (pairing waits in the store)", nats_fix)]
    elif status.get("connected"):
        checks = [Check("federation", OK, f"configured: {where}: connected")]
        checks += bus_checks(settings.nats, status.get("this_box", {}).get("box", "BOX_ID"), status.get("checks"))
    else:
        why = f" ({status['last_error']})" if status.get("last_error") else ""
        checks = [Check("federation", WARN, f"configured: {where}: not connected{why}",
                        "check the server, the credentials and `connectd federate provision` (the daemon keeps retrying)")]
    checks += [pairing_check(p) for p in pairings]
    for r in requests:
        checks.append(Check(f"pair request {r['name']}", WARN, f"box {r['box']}, fingerprint {r['fingerprint']}: waits for you",
                            f"compare the fingerprint, then `connectd pair approve {r['box']}` or `connectd pair decline {r['box']}`"))
    return checks


def bus_checks(nats: str, box_id: str, found: dict[str, Any] | None) -> list[Check]:
    """The bus's read-only checks as the daemon ran them (``GET /api/pairing/status?checks=1``: its
    :meth:`connectd.federation.bus.NatsBus.health`): the NATS server's version, JetStream on, this box's
    consumer present; each failure with what to run. None (not connected meanwhile): no lines."""
    if not found:
        return []
    version = found.get("server_version") or "unknown"
    checks = [Check("nats server", OK, f"nats-server {version} at {nats}")]
    provision = (f"the NATS operator runs `{facts.cli_command()} federate provision {box_id} --nats {nats}` "
                 "with the operator's credentials")
    if not found.get("jetstream"):
        checks.append(Check("jetstream", FAIL, f"JetStream is not enabled on {nats}"
                            + (f" ({found['problem']})" if found.get("problem") else ""),
                            "enable it on the server (a `jetstream { store_dir: ... }` block in its configuration, "
                            f"or `nats-server -js`), then {provision}"))
        return checks
    checks.append(Check("jetstream", OK, f"enabled on {nats}"))
    consumer, stream = found.get("consumer_name"), found.get("stream")
    if found.get("consumer") is True:
        checks.append(Check("consumer", OK, f"{consumer} on stream {stream} is there"))
    elif found.get("consumer") is False:
        checks.append(Check("consumer", FAIL, f"{consumer} on stream {stream} is missing ({found.get('problem')}): "
                            "nothing reaches this box", provision))
    else:
        checks.append(Check("consumer", WARN, f"{consumer} on stream {stream}: not known ({found.get('problem')})",
                            "run `connectd doctor` again; if it stays so, check the server and this box's permissions"))
    return checks


def pairing_check(p: dict[str, Any]) -> Check:
    """One pairing: its box, fingerprint and state; an active one with when its box was last heard and
    its directory's age (``pair list``'s words), a warning when that directory is not fresh."""
    from connectd.cli.pair import heard_words

    detail = f"box {p['box']}, fingerprint {p['fingerprint']}: {p['state']}" + (
        f" (by {p['removed_by']})" if p.get("removed_by") else "")
    if p["state"] != "active":
        return Check(f"pairing {p['name']}", OK, detail)
    heard, directory = heard_words(p.get("heard_at")), p.get("directory") or "none yet"
    detail += f"; last heard {'not since the daemon started' if heard == '-' else heard}; directory {directory}"
    if directory == "fresh":
        return Check(f"pairing {p['name']}", OK, detail)
    return Check(f"pairing {p['name']}", WARN, detail,
                 f"box {p['name']} has not published its directory lately: run `connectd doctor` on it "
                 "(its daemon running, connected to NATS, this pairing active there)")


def run_checks(data_dir: Path, port: int) -> list[Check]:
    return [
        check_tmux(),
        *check_fleet(),
        *(check_harness(h) for h in compat.VERIFIED),
        check_data_dir(data_dir),
        check_port(port, data_dir),
        check_daemon(data_dir, port),
        *check_federation(data_dir),
    ]


def report(checks: list[Check], as_json: bool) -> tuple[int, str]:
    status = 1 if any(c.status == FAIL for c in checks) else 0
    if as_json:
        return status, json.dumps({"ok": status == 0, "checks": [asdict(c) for c in checks]}, indent=2)
    mark = {OK: "ok  ", WARN: "warn", FAIL: "FAIL"}
    lines = []
    for c in checks:
        lines.append(f"[{mark[c.status]}] {c.name}: {c.detail}")
        if c.fix:
            lines.append(f"       fix: {c.fix}")
    failed, warned = sum(c.status == FAIL for c in checks), sum(c.status == WARN for c in checks)
    if failed:
        lines.append(f"{failed} problem{'s' if failed > 1 else ''} to fix")
    else:
        lines.append("ready" if not warned else f"ready, with {warned} warning{'s' if warned > 1 else ''} (above, each with its fix)")
    return status, "\n".join(lines)
