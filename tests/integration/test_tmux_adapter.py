"""The tmux adapter on a real private tmux server (no mocks)."""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectd.tmux import procfs
from connectd.tmux.adapter import (
    Capture,
    PaneInfo,
    SyncTmux,
    TmuxAdapter,
    TmuxError,
    TmuxInputError,
    TmuxNoServer,
)
from tests.support.tmux_server import TmuxServer, tmux_server_fixture

PY = sys.executable

# Puts the pty in raw mode, enables bracketed paste, and records every byte it receives until the
# paste's end marker followed by Enter (\r), then writes them to argv[1] atomically.
RECORDER = r"""
import os, sys, tty
tty.setraw(0)
os.write(1, b"\x1b[?2004h" + b"ready\r\n")
buf = b""
while b"\x1b[201~\r" not in buf:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    buf += chunk
with open(sys.argv[1] + ".part", "wb") as f:
    f.write(buf)
os.rename(sys.argv[1] + ".part", sys.argv[1])
"""

# Puts the pty in raw mode, enables bracketed paste, and appends every byte it receives to argv[1].
KEYLOG = r"""
import os, sys, tty
tty.setraw(0)
os.write(1, b"\x1b[?2004h" + b"ready\r\n")
with open(sys.argv[1], "ab", buffering=0) as f:
    while chunk := os.read(0, 65536):
        f.write(chunk)
"""

# Records its environment, argv and open files as JSON, then waits for a line "/exit" on stdin.
ENV_DUMP = r"""
import json, os, sys
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        pass
with open(sys.argv[1] + ".part", "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv, "fds": fds, "cwd": os.getcwd()}, f)
os.rename(sys.argv[1] + ".part", sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "/exit":
        sys.exit(0)
"""


@pytest.fixture(scope="module")
def server() -> Iterator[TmuxServer]:
    yield from tmux_server_fixture("connect-adapter")


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("scripts")
    (d / "recorder.py").write_text(RECORDER)
    (d / "env_dump.py").write_text(ENV_DUMP)
    (d / "keylog.py").write_text(KEYLOG)
    return d


@pytest.fixture()
def tmux(server: TmuxServer, tmp_path: Path) -> SyncTmux:
    launch = tmp_path / "data"
    launch.mkdir(mode=0o700)
    return server.adapter(launcher_dir=launch).sync


def unique(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(3)}"


def pane(tmux: SyncTmux, pane_id: str) -> PaneInfo:
    return next(p for p in tmux.list_panes() if p.pane_id == pane_id)


def all_cmdlines() -> dict[int, bytes]:
    """The argv of every process on the machine (what `ps` would show anyone)."""
    argvs = {pid: procfs.cmdline(pid) for pid in procfs.all_pids()}
    return {pid: "\0".join(argv).encode("utf-8", "surrogateescape") for pid, argv in argvs.items() if argv}


def wait_file(path: Path) -> Path:
    return TmuxServer.wait_for(lambda: path if path.exists() else None, what=f"{path.name} to be written")


# --- listing ------------------------------------------------------------------------------------


def test_list_panes_reports_every_field(server: TmuxServer, tmux: SyncTmux, tmp_path: Path) -> None:
    session = unique("list")
    title_cmd = r"printf '\033]2;tïtle; with ; semicolons\033\\'; exec sleep 60"
    pane_id = server.new_session(session, ["sh", "-c", title_cmd], width=91, height=27, cwd=str(tmp_path))
    info = server.wait_for(
        lambda: (p := pane(tmux, pane_id)).current_command == "sleep" and p.title.startswith("tï") and p,
        what="sleep with its title",
    )
    assert info.server_pid == int(server.tmux("display-message", "-p", "#{pid}"))
    assert abs(info.server_start_time - int(server.tmux("display-message", "-p", "#{start_time}"))) == 0
    assert info.session_name == session
    assert info.session_id == server.display(pane_id, "#{session_id}")
    assert info.window_id == server.display(pane_id, "#{window_id}")
    assert info.window_index == int(server.display(pane_id, "#{window_index}"))
    assert info.pane_id == pane_id
    assert info.pane_pid == server.pane_pid(pane_id)
    assert info.process_start_time == procfs.process_start_time(info.pane_pid)
    assert info.process_start_time is not None
    assert info.current_path == str(tmp_path)
    assert info.title == "tïtle; with ; semicolons"
    assert (info.dead, info.dead_status) == (False, None)
    assert (info.width, info.height) == (91, 27)
    cursor = server.display(pane_id, "#{cursor_x} #{cursor_y}").split()
    assert (info.cursor_x, info.cursor_y) == (int(cursor[0]), int(cursor[1]))
    assert info.incarnation_key == (
        info.server_pid,
        info.server_start_time,
        pane_id,
        info.pane_pid,
        info.process_start_time,
    )


def test_list_panes_survives_control_characters_in_commands_and_paths(
    server: TmuxServer, tmux: SyncTmux, tmp_path: Path
) -> None:
    weird = tmp_path / "we\x1fird\nname"
    weird.mkdir()
    # argv[0] with a unit separator and a newline: the fields and lines must still parse.
    cmd = ["bash", "-c", "exec -a $'x\\x1fy\\nz' sleep 60"]
    pane_id = server.new_session(unique("weird"), cmd, cwd=str(weird))
    info = server.wait_for(lambda: (p := pane(tmux, pane_id)).current_command != "bash" and p, what="exec")
    assert info.current_command == "x\ufffdy\ufffdz"
    assert info.current_path == str(weird).replace("\x1f", "\ufffd").replace("\n", "\ufffd")
    assert all(p.pane_id.startswith("%") for p in tmux.list_panes())


def test_dead_pane_has_status_and_no_process_start_time(server: TmuxServer, tmux: SyncTmux) -> None:
    pane_id = server.new_session(unique("dead"), ["sleep", "60"])
    tmux.set_pane_option(pane_id, "remain-on-exit", "on")
    server.tmux("respawn-pane", "-k", "-t", pane_id, "--", "sh", "-c", "exit 3")
    # list_panes reaps first (tmux 3.3a can lose an exit; a child run by the server reaps it), so the
    # listing alone shows the status
    info = server.wait_for(lambda: (p := pane(tmux, pane_id)).dead_status is not None and p, what="pane death")
    assert (info.dead, info.dead_status, info.process_start_time) == (True, 3, None)


def test_no_server_lists_nothing_and_refuses_commands() -> None:
    tmux = SyncTmux(socket_name=unique("connect-absent-"), config_file="/dev/null")
    assert tmux.list_panes() == []
    assert tmux.list_sessions() == []
    assert not tmux.server_running()
    assert not tmux.has_pane("%0")
    with pytest.raises(TmuxNoServer, match="no server running|error connecting"):
        tmux.capture("%0")


def test_list_sessions_and_has_pane(server: TmuxServer, tmux: SyncTmux) -> None:
    name = unique("sess")
    pane_id = server.new_session(name, ["sleep", "60"])
    sessions = {s.name: s.session_id for s in tmux.list_sessions()}
    assert sessions[name] == server.display(pane_id, "#{session_id}")
    assert tmux.has_pane(pane_id)
    tmux.kill_pane(pane_id)
    assert not tmux.has_pane(pane_id)
    assert name not in {s.name for s in tmux.list_sessions()}
    with pytest.raises(TmuxError, match="can't find pane"):
        tmux.kill_pane(pane_id)


# --- refusals -------------------------------------------------------------------------------------

BAD_PANE_IDS = ["", "%", "1", "main", "%1;", "%1 ", " %1", "%1\n", "$1", "@1", "%-1", "main:0.0", None, 1]


@pytest.mark.parametrize("bad", BAD_PANE_IDS)
def test_bad_pane_ids_are_refused_before_tmux_runs(tmux: SyncTmux, bad: object) -> None:
    adapter = TmuxAdapter(socket_name=unique("connect-never-"))
    for call in (
        lambda: tmux.capture(bad),  # type: ignore[arg-type]
        lambda: tmux.paste_text(bad, "x"),  # type: ignore[arg-type]
        lambda: tmux.press_enter(bad),  # type: ignore[arg-type]
        lambda: tmux.get_pane_option(bad, "remain-on-exit"),  # type: ignore[arg-type]
        lambda: tmux.set_pane_option(bad, "remain-on-exit", "on"),  # type: ignore[arg-type]
        lambda: tmux.respawn(bad, ["true"], "/", {}),  # type: ignore[arg-type]
        lambda: tmux.kill_pane(bad),  # type: ignore[arg-type]
        lambda: tmux.has_pane(bad),  # type: ignore[arg-type]
        lambda: adapter.pane_lock(bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(TmuxInputError, match="not a tmux pane id"):
            call()


def test_pane_named_like_a_session_gets_nothing(server: TmuxServer, tmux: SyncTmux) -> None:
    name = unique("victim")
    pane_id = server.new_session(name, ["cat"])
    with pytest.raises(TmuxInputError):
        tmux.paste_text(name, "should not arrive")
    assert "should not arrive" not in server.capture(pane_id)


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        ({"argv": []}, "argv must be"),
        ({"argv": ["sh", ""]}, "argv must be"),
        ({"argv": ["sh\x00"]}, "argv must be"),
        ({"env": {"1BAD": "x"}}, "not a valid environment variable name"),
        ({"env": {"A-B": "x"}}, "not a valid environment variable name"),
        ({"env": {"A": "x\x00y"}}, "NUL"),
        ({"cwd": "/no/such/dir"}, "working directory does not exist"),
    ],
)
def test_bad_launch_input_is_refused_and_leaves_nothing(
    server: TmuxServer, tmux: SyncTmux, kwargs: dict[str, object], problem: str
) -> None:
    session = unique("refuse")
    server.new_session(session, ["sleep", "60"])
    before = len(tmux.list_panes())
    args: dict[str, object] = {"argv": ["sleep", "1"], "cwd": "/", "env": {}} | kwargs
    with pytest.raises(TmuxInputError, match=problem):
        tmux.new_window(session, **args)  # type: ignore[arg-type]
    assert len(tmux.list_panes()) == before
    assert list(tmux.launcher_dir().iterdir()) == []


def test_failed_launch_removes_its_launcher(tmux: SyncTmux) -> None:
    with pytest.raises(TmuxError, match="can't find session"):
        tmux.new_window(unique("nosuch"), ["sleep", "1"], "/", {"CONNECT_TOKEN": "x"})
    assert list(tmux.launcher_dir().iterdir()) == []


def test_stale_launchers_are_removed_fresh_ones_kept(tmux: SyncTmux) -> None:
    stale = tmux.write_launcher(["true"], {"CONNECT_TOKEN": "old"})
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    fresh = tmux.write_launcher(["true"], {"CONNECT_TOKEN": "new"})
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    assert tmux.remove_stale_launchers(older_than=60) == 1
    assert list(tmux.launcher_dir().iterdir()) == [fresh]


def test_launcher_dir_must_be_private(server: TmuxServer, tmp_path: Path) -> None:
    base = tmp_path / "open"
    base.mkdir()
    (base / "launch").mkdir(mode=0o755)
    os.chmod(base / "launch", 0o755)
    tmux = server.adapter(launcher_dir=base).sync
    with pytest.raises(TmuxError, match="mode 0700"):
        tmux.new_window("main", ["true"], "/", {"CONNECT_TOKEN": "secret"})


# --- capture --------------------------------------------------------------------------------------


def test_capture_screen_cursor_and_scrollback(server: TmuxServer, tmux: SyncTmux) -> None:
    # 30 lines, then a clear (tmux moves the cleared screen to history) and three lines at the top.
    program = "seq 1 30; printf '\\033[2J\\033[Hhéllo wörld  \\n\\nprompt> '; exec sleep 60"
    pane_id = server.new_session(unique("cap"), ["sh", "-c", program], width=40, height=8)
    server.wait_for(lambda: "prompt>" in server.capture(pane_id), what="prompt")
    cap = tmux.capture(pane_id)
    assert isinstance(cap, Capture)
    assert (cap.width, cap.height) == (40, 8)
    assert cap.text.endswith("\n")  # capture-pane's own form: every row ends with a newline
    lines = cap.text.split("\n")[:-1]
    assert lines == ["héllo wörld", "", "prompt>", "", "", "", "", ""]  # trailing blank lines kept
    assert cap.cursor == (len("prompt> "), 2)

    deep = tmux.capture(pane_id, scrollback_lines=10)
    deep_lines = deep.text.split("\n")[:-1]
    assert deep_lines[-8:] == lines  # the visible screen is always the last `height` lines
    assert deep_lines[:-8] == [str(n) for n in range(21, 31)]
    with pytest.raises(TmuxInputError, match="scrollback_lines"):
        tmux.capture(pane_id, scrollback_lines=-1)


def test_capture_of_a_missing_pane_fails(tmux: SyncTmux, server: TmuxServer) -> None:
    server.new_session(unique("any"), ["sleep", "60"])
    with pytest.raises(TmuxError, match="can't find pane"):
        tmux.capture("%999999")


# --- paste ----------------------------------------------------------------------------------------

PASTE_CASES = {
    "leading-dash": "-t %0 -l --not-a-flag",
    "semicolons": "a; b ;c;",
    "only-semicolon": ";",
    "newlines-unicode": "line one\nligne deux é\n日本語 🎉\n\nend",
    "large": "".join(f"{n:05d} {'x' * 90};\n" for n in range(200)) + "-tail",  # ~19 KiB
    "tmux-syntax": "#{pane_id} $HOME `id` \\; '\"",
}


@pytest.mark.parametrize("case", sorted(PASTE_CASES))
def test_paste_arrives_literally_then_enter(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path, case: str
) -> None:
    text = PASTE_CASES[case]
    out = tmp_path / "received"
    pane_id = server.new_session(unique("paste"), [PY, str(scripts / "recorder.py"), str(out)])
    server.wait_for(lambda: "ready" in server.capture(pane_id), what="recorder")
    tmux.paste_text(pane_id, text)
    tmux.press_enter(pane_id)
    received = wait_file(out).read_bytes()
    # Bracketed (the recorder enabled it), newlines as Enter (no -r), then the separate Enter.
    expected = b"\x1b[200~" + text.encode().replace(b"\n", b"\r") + b"\x1b[201~" + b"\r"
    assert received == expected
    assert not [b for b in server.tmux("list-buffers", "-F", "#{buffer_name}").split() if "connect" in b]


def test_paste_with_submit_after_is_one_call_whose_enter_the_server_presses_after_the_settle(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "received"
    pane_id = server.new_session(unique("psubmit"), [PY, str(scripts / "recorder.py"), str(out)])
    server.wait_for(lambda: "ready" in server.capture(pane_id), what="recorder")
    calls: list[tuple[str, ...]] = []
    real_run = tmux.run

    def counted(*args: str, stdin: bytes | None = None) -> str:
        calls.append(args)
        return real_run(*args, stdin=stdin)

    tmux.run = counted  # type: ignore[method-assign]
    started = time.monotonic()
    tmux.paste_text(pane_id, "one\ntwo", submit_after=0.3)
    returned = time.monotonic() - started
    tmux.run = real_run  # type: ignore[method-assign]
    received = wait_file(out).read_bytes()
    assert received == b"\x1b[200~one\rtwo\x1b[201~\r"  # the paste, then the server's Enter
    assert len(calls) == 1 and returned < 0.3  # one tmux call, which does not wait for the Enter
    with pytest.raises(TmuxInputError, match="submit_after"):
        tmux.paste_text(pane_id, "x", submit_after=-1)


class Keylog:
    """A pane whose program logs every byte it receives; `settled` waits until tmux has run every
    timer due before a sentinel it schedules itself (its timers fire in order of their deadlines)."""

    def __init__(self, server: TmuxServer, tmux: SyncTmux, scripts: Path, path: Path) -> None:
        self.server, self.tmux, self.path = server, tmux, path
        self.pane = server.new_session(unique("keys"), [PY, str(scripts / "keylog.py"), str(path)])
        server.wait_for(lambda: "ready" in server.capture(self.pane), what="keylog")

        self.seen = 0

    def settled(self, after: float) -> bytes:
        """What the program received since the last call, once every timer due in ``after`` s ran."""
        sentinel = unique("done").encode()
        self.tmux.run("run-shell", "-b", "-C", "-d", f"{after:.3f}", f"send-keys -t {self.pane} -l {sentinel.decode()}")
        received = bytes(self.server.wait_for(
            lambda: (data := self.path.read_bytes()) and sentinel in data and data, what="the sentinel"
        ))
        new, self.seen = received[self.seen:received.index(sentinel)], received.index(sentinel) + len(sentinel)
        return new


def pasted(text: str) -> bytes:
    return b"\x1b[200~" + text.encode() + b"\x1b[201~"


def test_the_early_enter_and_the_fallback_press_enter_exactly_once(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path
) -> None:
    keys = Keylog(server, tmux, scripts, tmp_path / "keys")
    token = tmux.paste_text(keys.pane, "early", submit_after=0.2)
    assert token is not None
    tmux.enter_once(keys.pane, token)
    tmux.enter_once(keys.pane, token)  # a second early Enter for the same paste presses nothing
    assert keys.settled(after=0.5) == pasted("early") + b"\r"  # nor does the fallback, once it is due
    assert tmux.get_pane_option(keys.pane, "@connect-typing") is None


def test_a_fallback_never_presses_enter_for_a_later_paste(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path
) -> None:
    keys = Keylog(server, tmux, scripts, tmp_path / "keys")
    first = tmux.paste_text(keys.pane, "first", submit_after=0.2)
    tmux.paste_text(keys.pane, "second", submit_after=0.5)
    # The first fallback comes due while the second paste owes its Enter: only the second presses.
    assert keys.settled(after=0.8) == pasted("first") + pasted("second") + b"\r"
    assert first is not None
    tmux.enter_once(keys.pane, first)  # the first paste's token is spent: its early Enter does nothing
    third = tmux.paste_text(keys.pane, "third", submit_after=0.2)
    tmux.paste_text(keys.pane, "fourth")  # a paste without submit cancels the Enter owed before it
    assert third is not None
    assert keys.settled(after=0.5) == pasted("third") + pasted("fourth")


def test_the_fallback_alone_submits_when_no_early_enter_comes(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path
) -> None:
    """The daemon killed right after the paste call: the server's fallback presses the one Enter."""
    keys = Keylog(server, tmux, scripts, tmp_path / "keys")
    tmux.paste_text(keys.pane, "alone", submit_after=0.2)
    assert keys.settled(after=0.5) == pasted("alone") + b"\r"


def test_enter_once_refuses_a_bad_token_and_does_nothing_for_a_missing_pane(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path
) -> None:
    keys = Keylog(server, tmux, scripts, tmp_path / "keys")
    with pytest.raises(TmuxInputError, match="token"):
        tmux.enter_once(keys.pane, "x' ; kill-server ; '")
    token = tmux.paste_text(keys.pane, "owed", submit_after=5)
    assert token is not None
    tmux.enter_once("%999999", token)  # no error, no Enter anywhere
    assert keys.settled(after=0.1) == pasted("owed")
    tmux.enter_once(keys.pane, token)
    assert keys.settled(after=0.1) == b"\r"


def test_paste_refuses_empty_and_nul(tmux: SyncTmux, server: TmuxServer) -> None:
    pane_id = server.new_session(unique("pnul"), ["cat"])
    with pytest.raises(TmuxInputError, match="non-empty"):
        tmux.paste_text(pane_id, "")
    with pytest.raises(TmuxInputError, match="NUL"):
        tmux.paste_text(pane_id, "a\x00b")


def test_paste_into_missing_pane_fails_and_leaves_no_buffer(tmux: SyncTmux, server: TmuxServer) -> None:
    server.new_session(unique("pmiss"), ["sleep", "60"])
    with pytest.raises(TmuxError, match="can't find pane"):
        tmux.paste_text("%999999", "hello")
    assert "connect-" not in server.tmux("list-buffers", "-F", "#{buffer_name}")


# --- options --------------------------------------------------------------------------------------


def test_pane_options_get_set_unset(server: TmuxServer, tmux: SyncTmux) -> None:
    pane_id = server.new_session(unique("opt"), ["sleep", "60"])
    assert tmux.get_pane_option(pane_id, "remain-on-exit") is None
    tmux.set_pane_option(pane_id, "remain-on-exit", "on")
    assert tmux.get_pane_option(pane_id, "remain-on-exit") == "on"
    assert server.display(pane_id, "#{remain-on-exit}") == "on"  # effective value
    tmux.set_pane_option(pane_id, "remain-on-exit", None)
    assert tmux.get_pane_option(pane_id, "remain-on-exit") is None

    assert tmux.get_pane_option(pane_id, "@connect-test") is None
    for value in ["-x", "a b ;", ";", "", "quote \" and ' here"]:
        tmux.set_pane_option(pane_id, "@connect-test", value)
        assert tmux.get_pane_option(pane_id, "@connect-test") == value
    tmux.set_pane_option(pane_id, "@connect-test", None)
    assert tmux.get_pane_option(pane_id, "@connect-test") is None


@pytest.mark.parametrize("name", ["", "Remain", "remain-on-exit;", "-p", "a b", "@", None])
def test_bad_option_names_are_refused(tmux: SyncTmux, name: object) -> None:
    with pytest.raises(TmuxInputError, match="not a tmux option name"):
        tmux.get_pane_option("%0", name)  # type: ignore[arg-type]
    with pytest.raises(TmuxInputError, match="not a tmux option name"):
        tmux.set_pane_option("%0", name, "on")  # type: ignore[arg-type]


def test_option_values_with_control_characters_are_refused(server: TmuxServer, tmux: SyncTmux) -> None:
    pane_id = server.new_session(unique("optc"), ["sleep", "60"])
    with pytest.raises(TmuxInputError, match="control character"):
        tmux.set_pane_option(pane_id, "@connect-test", "a\nb")
    assert tmux.get_pane_option(pane_id, "@connect-test") is None


def test_unknown_option_is_a_tmux_error(server: TmuxServer, tmux: SyncTmux) -> None:
    pane_id = server.new_session(unique("optu"), ["sleep", "60"])
    with pytest.raises(TmuxError, match="invalid option"):
        tmux.get_pane_option(pane_id, "no-such-option")


# --- launch, exit, respawn, secrets ------------------------------------------------------------


def test_restart_in_place_keeps_pane_id_and_hides_the_token(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path
) -> None:
    token = "connect-secret-" + secrets.token_hex(16)
    env = {"CONNECT_TOKEN": token, "TRICKY": 'it\'s a "value"\nwith $HOME and `id`'}
    session = unique("launch")
    server.new_session(session, ["sleep", "60"])
    first = tmp_path / "first.json"
    pane_id = tmux.new_window(session, [PY, str(scripts / "env_dump.py"), str(first)], str(tmp_path), env)
    seen = json.loads(wait_file(first).read_text())
    assert seen["env"]["CONNECT_TOKEN"] == token
    assert seen["env"]["TRICKY"] == env["TRICKY"]
    assert seen["cwd"] == str(tmp_path)
    assert not any("launch-" in target for target in seen["fds"].values())
    assert list(tmux.launcher_dir().iterdir()) == []  # the launcher deleted itself
    before = pane(tmux, pane_id)
    assert before.pane_pid is not None and not before.dead

    # Restart-to-connect: remain-on-exit, the harness's own exit command, respawn in place.
    original = tmux.get_pane_option(pane_id, "remain-on-exit")
    tmux.set_pane_option(pane_id, "remain-on-exit", "on")
    tmux.paste_text(pane_id, "/exit")
    time.sleep(0.1)  # let the paste settle before Enter, as the agent TUIs need
    tmux.press_enter(pane_id)
    dead = server.wait_for(lambda: (p := pane(tmux, pane_id)).dead and p, what="agent exit")
    if dead.dead_status is None:
        tmux.reap()
    assert server.wait_for(lambda: pane(tmux, pane_id).dead_status == 0 or None, what="exit status 0")

    second = tmp_path / "second.json"
    tmux.respawn(pane_id, [PY, str(scripts / "env_dump.py"), str(second)], str(tmp_path), env)
    seen = json.loads(wait_file(second).read_text())
    assert seen["env"]["CONNECT_TOKEN"] == token
    after = pane(tmux, pane_id)
    assert after.pane_id == pane_id and after.window_id == before.window_id
    assert after.pane_pid != before.pane_pid
    assert not after.dead and after.process_start_time is not None
    assert after.incarnation_key != before.incarnation_key
    tmux.set_pane_option(pane_id, "remain-on-exit", original)
    assert tmux.get_pane_option(pane_id, "remain-on-exit") is None

    leaks = {pid: cmd for pid, cmd in all_cmdlines().items() if token.encode() in cmd}
    assert leaks == {}
    assert (
        str(before.server_pid)
        and token.encode() not in Path(f"/proc/{before.server_pid}/cmdline").read_bytes()
    )
    assert list(tmux.launcher_dir().iterdir()) == []


def test_respawn_of_a_live_pane_needs_kill(server: TmuxServer, tmux: SyncTmux) -> None:
    pane_id = server.new_session(unique("live"), ["sleep", "60"])
    old_pid = pane(tmux, pane_id).pane_pid
    with pytest.raises(TmuxError, match="still active"):
        tmux.respawn(pane_id, ["sleep", "61"], "/", {})
    assert list(tmux.launcher_dir().iterdir()) == []
    tmux.respawn(pane_id, ["sleep", "61"], "/", {}, kill=True)
    assert server.wait_for(lambda: pane(tmux, pane_id).pane_pid != old_pid, what="new pid")


def test_new_session_starts_a_server_whose_argv_holds_no_token(scripts: Path, tmp_path: Path) -> None:
    token = "connect-secret-" + secrets.token_hex(16)
    out = tmp_path / "env.json"
    launch = tmp_path / "data"
    launch.mkdir(mode=0o700)
    with TmuxServer("connect-fresh") as fresh:
        tmux = fresh.adapter(launcher_dir=launch).sync
        assert not tmux.server_running()
        pane_id = tmux.new_session(
            "demo",
            [PY, str(scripts / "env_dump.py"), str(out)],
            str(tmp_path),
            {"CONNECT_TOKEN": token},
            width=100,
            height=30,
        )
        assert json.loads(wait_file(out).read_text())["env"]["CONNECT_TOKEN"] == token
        info = pane(tmux, pane_id)
        assert (info.session_name, info.width, info.height) == ("demo", 100, 30)
        server_argv = Path(f"/proc/{info.server_pid}/cmdline").read_bytes()
        assert b"new-session" in server_argv and token.encode() not in server_argv
        assert {pid: c for pid, c in all_cmdlines().items() if token.encode() in c} == {}
    assert not fresh.running()


# --- async surface and locks --------------------------------------------------------------------


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_async_adapter_round_trip(server: TmuxServer, scripts: Path, tmp_path: Path) -> None:
    launch = tmp_path / "data"
    launch.mkdir(mode=0o700)
    adapter: TmuxAdapter = server.adapter(launcher_dir=launch)
    session = unique("async")
    server.new_session(session, ["sleep", "60"])
    out = tmp_path / "env.json"
    pane_id = await adapter.new_window(session, [PY, str(scripts / "env_dump.py"), str(out)], "/", {"A": "1"})
    assert await adapter.has_pane(pane_id)
    assert pane_id in {p.pane_id for p in await adapter.list_panes()}
    assert session in {s.name for s in await adapter.list_sessions()}
    assert await adapter.server_running()
    while not out.exists():
        await anyio_sleep()
    await adapter.set_pane_option(pane_id, "remain-on-exit", "on")
    assert await adapter.get_pane_option(pane_id, "remain-on-exit") == "on"
    async with adapter.pane_lock(pane_id):
        await adapter.send_exit_command(pane_id, "/exit", settle=0.1)
    while not (p := pane(adapter.sync, pane_id)).dead:
        await anyio_sleep()
    await adapter.reap()
    await adapter.respawn(pane_id, ["sh", "-c", "echo respawned; exec sleep 60"], "/", {})
    while "respawned" not in (await adapter.capture(pane_id)).text:
        await anyio_sleep()
    assert pane(adapter.sync, pane_id).pane_pid != p.pane_pid
    await adapter.kill_pane(pane_id)
    assert not await adapter.has_pane(pane_id)


async def anyio_sleep() -> None:
    import anyio

    await anyio.sleep(0.02)


def test_pane_locks_are_one_per_pane_and_kept_while_held() -> None:
    adapter = TmuxAdapter(socket_name=unique("connect-locks-"))
    a, b = adapter.pane_lock("%1"), adapter.pane_lock("%2")
    assert a is adapter.pane_lock("%1") and a is not b

    import anyio

    async def main() -> None:
        async with a:
            adapter.forget_pane_locks(set())
            assert adapter.pane_lock("%1") is a  # held: never replaced under its holder
        adapter.forget_pane_locks({"%1"})
        assert adapter.pane_lock("%1") is a  # live: kept
        adapter.forget_pane_locks(set())
        assert adapter.pane_lock("%1") is not a  # gone and free: dropped

    anyio.run(main)


# --- tmux formats: untrusted text is never expanded (issue 21 item 3) ------------------------------


def _format_trap(tmp_path: Path) -> tuple[Path, Path]:
    """A directory whose name runs `touch MARKER` if tmux expands it as a format."""
    marker = tmp_path / "MARKER"
    trap = tmp_path / f"w#(touch {marker})#{{pane_id}}##x"
    trap.mkdir(parents=True)
    return trap, marker


@pytest.mark.parametrize("how", ["new_window", "new_session", "respawn"])
def test_a_working_directory_is_never_a_tmux_format(
    server: TmuxServer, tmux: SyncTmux, scripts: Path, tmp_path: Path, how: str
) -> None:
    """A cwd holding #(...) and #{...} runs nothing and the process starts in exactly that directory."""
    trap, marker = _format_trap(tmp_path)
    out = tmp_path / "dump.json"
    argv = [PY, str(scripts / "env_dump.py"), str(out)]
    session = unique("fmt")
    if how == "new_window":
        server.new_session(session, ["sleep", "60"])
        pane_id = tmux.new_window(session, argv, str(trap), {})
    elif how == "new_session":
        pane_id = tmux.new_session(session, argv, str(trap), {})
    else:
        pane_id = server.new_session(session, ["sleep", "60"])
        tmux.respawn(pane_id, argv, str(trap), {}, kill=True)
    assert json.loads(wait_file(out).read_text())["cwd"] == str(trap)
    tmux.reap()
    time.sleep(0.3)
    assert not marker.exists()
    tmux.kill_pane(pane_id)


def test_a_session_name_is_never_a_tmux_format(server: TmuxServer, tmux: SyncTmux, tmp_path: Path) -> None:
    """A session name holding #(...) runs nothing and is kept literally."""
    marker = tmp_path / "MARKER"
    name = unique("s#(touch " + str(marker).replace(".", "_") + ")")
    pane_id = tmux.new_session(name, ["sleep", "60"], str(tmp_path), {})
    tmux.reap()
    time.sleep(0.3)
    assert not marker.exists()
    assert name in {s.name for s in tmux.list_sessions()}
    tmux.kill_pane(pane_id)


def test_a_pane_option_value_is_stored_literally(server: TmuxServer, tmux: SyncTmux, tmp_path: Path) -> None:
    """A user-option value holding #(...) is stored as given and runs nothing."""
    marker = tmp_path / "MARKER"
    pane_id = server.new_session(unique("opt"), ["sleep", "60"])
    value = f"#(touch {marker})#{{pane_id}}"
    tmux.set_pane_option(pane_id, "@connect-test", value)
    assert tmux.get_pane_option(pane_id, "@connect-test") == value
    tmux.reap()
    time.sleep(0.3)
    assert not marker.exists()
    tmux.kill_pane(pane_id)
