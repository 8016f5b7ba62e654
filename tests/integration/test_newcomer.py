"""Issue 23, a newcomer's first hour: ``connectd run`` inside tmux and without it (the demo), refusals
as one line and a ``fix:`` line, the global flags, warnings when there is nothing to show, the advice a
hand-started agent gets, and human answers from ``grant`` and ``revoke``. Every test drives the real
CLI in a subprocess, as a person's terminal does, and reads what it printed."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import anyio
import pytest

from tests.support.daemon import ROOT, DaemonProcess, mcp_agent, wait_for
from tests.support.fixtures import running_daemon, tmux_session
from tests.support.tmux_server import TmuxServer


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE", "CONNECT_DATA_DIR")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
    return {**env, **extra}


def connectd(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "connectd.cli", *args], capture_output=True, text=True,
                          env=env or cli_env(), timeout=timeout)


def assert_refusal(done: subprocess.CompletedProcess[str], problem: str, fix: str) -> None:
    """Exit status 1; on stderr exactly one line naming the problem and one `fix:` line; no traceback."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("connectd: ") and problem in lines[0], lines
    assert lines[1].startswith("fix: ") and fix in lines[1], lines
    assert not re.search(r"\b(409|404): ", done.stderr), done.stderr  # no HTTP status prefix (a port may hold 409)


class Running:
    """A long-running ``connectd`` command (run, serve) in a subprocess, its output in files."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str]) -> None:
        self.out, self.err = tmp / "run.out", tmp / "run.err"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "connectd.cli", *args], env=env, cwd=str(tmp),
            stdout=self.out.open("w"), stderr=self.err.open("w"),
        )

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def wait_line(self, fragment: str, timeout: float = 45) -> str:
        def found() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode}:\n{self.stdout()}\n{self.stderr()}")
            return next((line for line in self.stdout().splitlines() if fragment in line), None)

        return str(wait_for(found, timeout, repr(fragment)))

    def interrupt(self) -> int:
        """Ctrl-C, as a person stops it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture
def quiet_tmux(tmp_path: Path) -> Iterator[Path]:
    """A TMUX_TMPDIR where no tmux server runs (short: a socket path has a length limit)."""
    path = Path(f"/tmp/cn-{os.getpid()}-{tmp_path.name[-12:]}")
    path.mkdir(mode=0o700)
    yield path
    subprocess.run(["tmux", "-L", "connect-demo", "kill-server"], env={**os.environ, "TMUX_TMPDIR": str(path)},
                   capture_output=True)
    subprocess.run(["rm", "-rf", str(path)], check=False)


def inside_pane(tmux: TmuxServer, pane: str) -> dict[str, str]:
    """The environment of a program started in ``pane`` of ``tmux``: $TMUX names its socket."""
    socket_path = tmux.display(pane, "#{socket_path}")
    return {"TMUX": f"{socket_path},{tmux.server_pid},0", "TMUX_PANE": pane}


# --- connectd run ------------------------------------------------------------------------------------


def test_run_inside_a_tmux_pane_serves_that_server_with_serve_s_options_and_says_so(
    tmp_path: Path, quiet_tmux: Path
) -> None:
    """Issue 23 item 1: `connectd run` inside tmux crashed (AttributeError: trust_release)."""
    with TmuxServer("connect-run") as tmux:
        pane = tmux.new_session("main", width=120, height=30)
        data = tmp_path / "data"
        env = cli_env(TMUX_TMPDIR=str(quiet_tmux), **inside_pane(tmux, pane))
        run = Running(tmp_path, "run", "--data-dir", str(data), "--port", "0", "--no-history",
                      "--trust-release", "claude@2.1.999", env=env)
        try:
            said = run.wait_line("connectd run:")
            assert "a tmux server is running, so this serves your own fleet" in said and "run --demo" in said
            run.wait_line("connectd listening on")
            login = run.wait_line("owner page:")
            assert f"token --open --data-dir {data}" in login
            listed = connectd("agents", "--json", "--data-dir", str(data), env=cli_env())
            assert listed.returncode == 0, listed.stderr
            assert [a["pane"] for a in json.loads(listed.stdout)] == [pane]  # the pane's own server, watched
        finally:
            status = run.interrupt()
        assert status == 0 and "Traceback" not in run.stderr(), run.stderr()


def run_demo_until_delivered(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[Running, str]:
    """Start the demo, follow its printed commands as printed, and wait for the outcome line."""
    run = Running(tmp_path, "run", "--port", "0", *args, env=env)
    run.wait_line("Ctrl-C stops the demo")
    out = run.stdout()
    prefix = [sys.executable, "-m", "connectd.cli"]  # how this test ran connectd: not `connectd`, not on PATH
    printed = [shlex.split(line.split("  #")[0]) for line in out.splitlines() if "--data-dir" in line]
    assert printed and all(words[: len(prefix)] == prefix for words in printed), printed
    commands = {words[len(prefix)]: words for words in printed}
    cards = subprocess.run([*commands["cards"], "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert cards.returncode == 0, cards.stderr
    (card,) = json.loads(cards.stdout)
    approve = [card["id"] if w == "CARD_ID" else w for w in commands["approve"]]
    approved = subprocess.run(approve, capture_output=True, text=True, env=env, timeout=60)
    assert approved.returncode == 0 and "approved_pair" in approved.stdout, approved.stderr
    outcome = run.wait_line("outcome:", 60)
    return run, outcome


def test_run_with_no_tmux_server_starts_the_demo_and_its_printed_commands_run_as_printed(
    tmp_path: Path, quiet_tmux: Path
) -> None:
    """Issue 23 item 2: the demo printed `connectd ...` (not on PATH from a checkout) and said nothing
    once the message was delivered."""
    env = cli_env(TMUX_TMPDIR=str(quiet_tmux), XDG_DATA_HOME=str(tmp_path / "xdg"))
    run, outcome = run_demo_until_delivered(tmp_path, env)
    try:
        out = run.stdout()
        assert out.splitlines()[0].startswith("connectd run: no tmux server is running, so this starts an isolated demo")
        assert "token --open --data-dir" in out  # the owner page's login command
        assert "A's message was delivered" in outcome

        demo_data = tmp_path / "xdg" / "connect-demo"
        second = connectd("run", "--demo", "--port", "0", env=env)  # a second demo: refused, the first untouched
        assert_refusal(second, f"another connectd is already running on {demo_data}", f"agents --data-dir {demo_data}")
        listed = connectd("agents", "--json", "--data-dir", str(demo_data), env=env)
        assert listed.returncode == 0, listed.stderr
        assert [a["harness"] for a in json.loads(listed.stdout)].count("claude") == 2  # A and B still there
    finally:
        status = run.interrupt()
    assert status == 0 and "Traceback" not in run.stderr(), run.stderr()


def test_run_demo_from_inside_tmux_leaves_your_server_alone(tmp_path: Path, quiet_tmux: Path) -> None:
    """Issue 23 item 1: the demo is offered from inside tmux too (`connectd run --demo`)."""
    with TmuxServer("connect-run") as tmux:
        pane = tmux.new_session("main", width=120, height=30)
        env = cli_env(TMUX_TMPDIR=str(quiet_tmux), XDG_DATA_HOME=str(tmp_path / "xdg"), **inside_pane(tmux, pane))
        run, outcome = run_demo_until_delivered(tmp_path, env, "--demo")
        try:
            assert run.stdout().splitlines()[0].startswith("connectd run --demo: an isolated demo fleet")
            assert "TMUX= tmux -L connect-demo attach" in run.stdout()  # attaching from inside tmux nests
            assert "A's message was delivered" in outcome
            assert tmux.tmux("list-panes", "-a", "-F", "#{pane_id}").split() == [pane]  # nothing opened here
        finally:
            status = run.interrupt()
    assert status == 0 and "Traceback" not in run.stderr(), run.stderr()


# --- refusals: one line and a fix ----------------------------------------------------------------------


def test_a_busy_port_and_a_second_daemon_are_one_line_and_a_fix(tmp_path: Path) -> None:
    """Issue 23 item 3: both ended in 15-line tracebacks (OSError: [Errno 98], RuntimeError)."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        done = connectd("serve", "--data-dir", str(tmp_path / "a"), "--port", str(port), "--tmux-socket", "cn-none",
                        "--no-history")
    assert_refusal(done, f"127.0.0.1:{port} is in use by another program", f"ss -ltnp 'sport = :{port}'")

    with TmuxServer("connect-two") as tmux:
        tmux.new_session("main")
        d = DaemonProcess(tmp_path, tmux).start()
        try:
            done = connectd("serve", "--data-dir", str(d.data_dir), "--port", "0", "--tmux-socket", tmux.socket_name,
                            "--no-history")
            assert_refusal(done, f"another connectd is already running on {d.data_dir}",
                           f"agents --data-dir {d.data_dir}")
        finally:
            d.stop()


def test_an_unusable_owner_token_file_is_one_line_and_a_fix(tmp_path: Path) -> None:
    """A data directory whose owner_token is empty (a disk that failed right after the first start,
    before secrets were written durably) ended in a traceback (ValueError from owner_auth)."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "owner_token").write_text("")
    os.chmod(data / "owner_token", 0o600)
    done = connectd("serve", "--data-dir", str(data), "--port", "0", "--tmux-socket", "cn-none", "--no-history")
    assert_refusal(done, f"{data / 'owner_token'} does not hold a usable secret", f"rm {data / 'owner_token'}")


@pytest.fixture
def daemon_and_tmux(tmp_path: Path) -> Iterator[tuple[DaemonProcess, TmuxServer]]:
    with tmux_session("connect-nc") as tmux, running_daemon(tmp_path, tmux) as d:
        yield d, tmux


def test_a_client_pointed_at_the_wrong_data_directory_is_told_where_the_daemon_is(
    tmp_path: Path, daemon_and_tmux: tuple[DaemonProcess, TmuxServer]
) -> None:
    """Issue 23 item 3: `agents` on the wrong data directory advised `connectd serve`, which then hit the port."""
    d, _ = daemon_and_tmux
    wrong = tmp_path / "elsewhere"
    done = connectd("agents", "--data-dir", str(wrong), "--port", str(d.port))
    assert_refusal(done, f"no daemon is running on {wrong}; the connectd on port {d.port} serves {d.data_dir}",
                   f"--data-dir {d.data_dir}")
    assert "serve" not in done.stderr.splitlines()[1]


def test_the_data_directory_may_come_before_the_command_or_from_connect_data_dir(
    daemon_and_tmux: tuple[DaemonProcess, TmuxServer]
) -> None:
    """Issue 23 item 3: `connectd --data-dir X cards` was "invalid choice"; CONNECT_DATA_DIR names it too."""
    d, _ = daemon_and_tmux
    before = connectd("--data-dir", str(d.data_dir), "cards", "--json")
    assert before.returncode == 0 and json.loads(before.stdout) == [], before.stderr
    from_env = connectd("agents", "--json", env=cli_env(CONNECT_DATA_DIR=str(d.data_dir)))
    assert from_env.returncode == 0 and len(json.loads(from_env.stdout)) == 1, from_env.stderr
    after_wins = connectd("--data-dir", "/nonexistent", "cards", "--data-dir", str(d.data_dir))
    assert after_wins.returncode == 0 and after_wins.stdout.strip() == "(none)", after_wins.stderr


# --- nothing to show: say why, with the fix --------------------------------------------------------


def test_no_tmux_session_is_warned_about_by_serve_agents_and_launch(tmp_path: Path) -> None:
    """Issue 23 item 4: serve started silently, agents printed `(none)`, launch said `409: no tmux
    session to open a window in` with no fix. Item 8: no HTTP status in a CLI error."""
    with TmuxServer("connect-empty") as tmux:  # never started: no tmux server on its socket
        d = DaemonProcess(tmp_path, tmux).start()
        try:
            listed = connectd("agents", "--data-dir", str(d.data_dir))
            assert listed.returncode == 0 and listed.stdout.strip() == "(none)"
            assert "warning: no tmux server is running" in listed.stderr and "  fix: start tmux" in listed.stderr
            launched = connectd("launch", "demo", "--data-dir", str(d.data_dir))
            assert_refusal(launched, "no tmux session to open a window in", "launch --here")
            assert connectd("agents", "--json", "--data-dir", str(d.data_dir)).stdout.strip() == "[]"  # --json: as before
        finally:
            d.stop()
        started = d.log_text()
    assert "warning: no tmux server is running" in started and "fix: start tmux (`tmux new-session" in started


def test_doctor_warns_of_no_tmux_server_and_no_harness_with_their_fixes(tmp_path: Path, quiet_tmux: Path) -> None:
    """Issue 23 item 4: doctor said "ready" with no tmux server and no harness on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tmux").symlink_to(str(subprocess.run(["which", "tmux"], capture_output=True, text=True).stdout.strip()))
    env = cli_env(TMUX_TMPDIR=str(quiet_tmux), PATH=str(bin_dir))
    data = ("--data-dir", str(tmp_path / "data"), "--port", "0")
    done = connectd("doctor", *data, env=env)
    assert done.returncode == 0, done.stdout  # warnings, not failures
    lines = done.stdout.splitlines()
    tmux_at = lines.index(next(x for x in lines if x.startswith("[warn] tmux server: no tmux server is running")))
    assert lines[tmux_at + 1].startswith("       fix: start tmux (`tmux new-session")
    harness_at = lines.index(next(x for x in lines if x.startswith("[warn] harnesses: no agent harness on PATH")))
    assert lines[harness_at + 1].startswith("       fix: install one, e.g. `npm install -g @anthropic-ai/claude-code@")
    assert lines[-1] == "ready, with 3 warnings (above, each with its fix)"  # and: no daemon runs yet

    with TmuxServer("connect-doc") as tmux:
        pane = tmux.new_session("main")
        checks = {c["name"]: c for c in json.loads(connectd("doctor", "--json", *data, env={**env, **inside_pane(tmux, pane)}).stdout)["checks"]}
    assert checks["tmux server"]["status"] == "ok" and checks["harnesses"]["status"] == "warn"


# --- grant and revoke: sentences; a hand-started agent: launch --here ---------------------------------


def test_grant_and_revoke_answer_in_a_sentence_and_json_only_when_asked(
    daemon_and_tmux: tuple[DaemonProcess, TmuxServer]
) -> None:
    """Issue 23 item 8: grant and revoke printed raw JSON."""
    d, _ = daemon_and_tmux
    agent = d.launch("b", "off", session="3a1f5c2e-9b7d-4e6a-8c0f-1d2e3f4a5b6c")
    d.wait_ready(agent)
    dd = ("--data-dir", str(d.data_dir))
    granted = connectd("grant", agent.pane, "observe", *dd)
    assert granted.returncode == 0, granted.stderr
    first, *rest = granted.stdout.strip().splitlines()
    assert first == f"{agent.pane} (claude:3a1f5c2e-9b7d-4e6a-8c0f-1d2e3f4a5b6c): Connect set to observe"
    assert rest == [f"{agent.pane}: connected: receives now; its tools arrive when connect relaunches it (restart-to-connect)"]
    revoked = connectd("revoke", agent.pane, *dd)
    assert revoked.returncode == 0 and revoked.stdout.startswith(
        "agent:claude:3a1f5c2e-9b7d-4e6a-8c0f-1d2e3f4a5b6c: Connect is off"), revoked.stdout
    again = connectd("revoke", agent.pane, *dd)
    assert again.returncode == 1 and again.stderr.strip() == (
        f"connectd: {agent.pane} holds no connected agent and no open restart to connect it"
    )
    as_json = connectd("grant", agent.pane, "observe", "--json", *dd)
    assert json.loads(as_json.stdout)["connect"] == "observe" and json.loads(as_json.stdout)["pane"] == agent.pane


def test_restart_to_connect_of_a_pane_connect_did_not_start_points_to_launch_here(
    daemon_and_tmux: tuple[DaemonProcess, TmuxServer]
) -> None:
    """Issue 23 item 7: restart-to-connect answered `409: ... connect it at its next launch`."""
    d, _ = daemon_and_tmux
    shell = next(a for a in d.api("GET", "/api/agents") if a["launcher"] is None)
    done = connectd("restart-to-connect", shell["pane"], "observe", "--data-dir", str(d.data_dir))
    assert_refusal(done, f"{shell['pane']} was not started by connectd, so restart-to-connect cannot relaunch it",
                   "run `connectd launch --here")


# --- MCP: serverInfo ----------------------------------------------------------------------------------


def test_the_mcp_server_names_its_version(daemon_and_tmux: tuple[DaemonProcess, TmuxServer]) -> None:
    """Issue 23 item 10: serverInfo.version was empty."""
    d, _ = daemon_and_tmux
    agent = d.launch("a", "observe")

    async def info() -> tuple[str, str]:
        async with mcp_agent(d.mcp_url, str(agent.token)) as client:
            return client.server_info.name, client.server_info.version

    name, shown = anyio.run(info)
    assert name == "connect" and shown == version("connect") and shown
