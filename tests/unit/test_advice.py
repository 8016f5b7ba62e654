"""Issue 23: what connect tells a person who is stuck (connectcore.advice), decided from facts alone."""

from __future__ import annotations

import pytest

from connectcore import advice as A


@pytest.mark.parametrize(
    ("demo_asked", "tmux_running", "mode"),
    [(False, True, A.RunMode.SERVE), (False, False, A.RunMode.DEMO), (True, True, A.RunMode.DEMO), (True, False, A.RunMode.DEMO)],
)
def test_run_serves_the_fleet_only_when_a_tmux_server_runs_and_no_demo_is_asked(
    demo_asked: bool, tmux_running: bool, mode: A.RunMode
) -> None:
    assert A.run_mode(demo_asked=demo_asked, tmux_server_running=tmux_running) is mode


def test_run_says_which_mode_it_chose_and_how_to_get_the_other() -> None:
    serve = A.run_mode_line(A.RunMode.SERVE, tmux_server_running=True, cli=".venv/bin/connectd")
    assert "serves your own fleet" in serve and "`.venv/bin/connectd run --demo`" in serve and "make demo" in serve
    demo = A.run_mode_line(A.RunMode.DEMO, tmux_server_running=False, cli="connectd")
    assert "no tmux server is running" in demo and "demo" in demo and "`connectd run` again" in demo
    asked = A.run_mode_line(A.RunMode.DEMO, tmux_server_running=True)
    assert asked.startswith("connectd run --demo:") and "left alone" in asked


def test_the_printed_command_is_connectd_only_when_that_is_what_path_runs() -> None:
    script = "/home/u/src/connect/.venv/bin/connectd"
    assert A.cli_command(running=script, on_path=script, python="/usr/bin/python3") == "connectd"
    assert A.cli_command(running=script, on_path=None, python="/usr/bin/python3") == script
    assert A.cli_command(running=script, on_path="/usr/local/bin/connectd", python="/p") == script  # another install
    spaced = "/home/u/my src/.venv/bin/connectd"
    assert A.cli_command(running=spaced, on_path=None, python="/p") == "'/home/u/my src/.venv/bin/connectd'"
    cli_py = "/home/u/src/connect/src/connectd/cli/__main__.py"  # python -m connectd.cli
    assert A.cli_command(running=cli_py, on_path=None, python="/v/bin/python") == "/v/bin/python -m connectd.cli"


def test_no_daemon_names_the_data_directory_a_daemon_on_the_port_serves() -> None:
    elsewhere = A.no_daemon("/home/u/.local/share/connect", 7878, served_elsewhere="/tmp/other dir", port_taken=True)
    assert elsewhere.problem == "no daemon is running on /home/u/.local/share/connect; the connectd on port 7878 serves /tmp/other dir"
    assert "`connectd --data-dir '/tmp/other dir' ...`" in elsewhere.fix and "CONNECT_DATA_DIR='/tmp/other dir'" in elsewhere.fix
    assert "serve" not in elsewhere.fix  # serving here would only hit the port

    taken = A.no_daemon("/d", 7878, served_elsewhere=None, port_taken=True)
    assert "another program holds port 7878" in taken.problem and "--port 7879" in taken.fix

    free = A.no_daemon("/d", 7878, served_elsewhere=None, port_taken=False)
    assert free == A.Advice("no daemon is running on /d", "start it: `connectd serve --data-dir /d` (or `make run` in a checkout)")
    same = A.no_daemon("/d", 7878, served_elsewhere="/d", port_taken=True)  # its daemon.json is gone: not "elsewhere"
    assert "serves" not in same.problem


def test_startup_refusals_are_one_line_and_a_fix() -> None:
    busy = A.port_in_use(7878, "[Errno 98] Address already in use")
    assert busy.lines("  ") == [
        "127.0.0.1:7878 is in use by another program ([Errno 98] Address already in use)",
        "  fix: see who holds it (`ss -ltnp 'sport = :7878'`) or run connectd with another --port (`connectd serve --port 7879`)",
    ]
    locked = A.daemon_running("/d")
    assert locked.problem == "another connectd is already running on /d" and "`connectd agents --data-dir /d`" in locked.fix
    assert A.Advice("p").lines() == ["p"]  # nothing to fix: no fix line


def test_a_fleet_with_no_tmux_server_or_no_harness_is_warned_about_with_its_fix() -> None:
    assert A.fleet_warnings(tmux_server_running=True, harnesses_on_path={"codex"}) == ()
    both = A.fleet_warnings(tmux_server_running=False, harnesses_on_path=set(), cli="c")
    assert [w.about for w in both] == ["tmux server", "harnesses"]
    assert "tmux new-session" in both[0].fix and "`c run --demo`" in both[0].fix
    assert "npm install -g @anthropic-ai/claude-code@" in both[1].fix and "a verified release" in both[1].fix
    assert A.fleet_warnings(tmux_server_running=True, harnesses_on_path={"vim"})[0].about == "harnesses"


def test_a_hand_started_agent_is_pointed_to_launch_here_not_restart_to_connect() -> None:
    launched = A.receive_only_note(started_by_connect=True, harness="claude", session_id="s-1")
    assert launched == "connected: receives now; its tools arrive when connect relaunches it (restart-to-connect)"
    by_hand = A.receive_only_note(started_by_connect=False, harness="claude", session_id="s-1")
    assert "restart-to-connect" not in by_hand and "`connectd launch --here claude --session s-1`" in by_hand
    unknown = A.receive_only_note(started_by_connect=False)
    assert "`connectd launch --here LAUNCHER --session SESSION_ID`" in unknown

    refused = A.hand_started_restart_refusal("%5", "codex", "019a")
    assert refused.problem == "%5 was not started by connectd, so restart-to-connect cannot relaunch it"
    assert "`connectd launch --here codex --session 019a`" in refused.fix


def test_a_session_id_is_quoted_into_the_command_it_is_pasted_into() -> None:
    """A session id comes from a harness's files: it is one shell word in the advice, never a command."""
    command = A.relaunch_here("claude", "x; rm -rf ~")
    assert command == "connectd launch --here claude --session 'x; rm -rf ~'"


def test_a_withheld_token_and_an_unreachable_daemon_name_the_command_that_tells_more() -> None:
    withheld = A.token_withheld("/d", 7878, "no process of yours listens there")
    assert withheld.problem == "refusing to send the owner token to 127.0.0.1:7878: no process of yours listens there"
    assert "`connectd serve --data-dir /d`" in withheld.fix and "`connectd doctor --data-dir /d`" in withheld.fix
    gone = A.unreachable("/d", "http://127.0.0.1:7878", "[Errno 111] Connection refused", cli="c")
    assert gone == A.Advice("cannot reach the daemon at http://127.0.0.1:7878: [Errno 111] Connection refused",
                            "see whether it runs: `c doctor --data-dir /d`")


def test_an_unusable_secret_is_removed_to_be_made_again_and_its_path_is_quoted() -> None:
    """Claim: the fix is the rm of exactly that file, quoted for the shell, and says what stops working."""
    from connectcore.advice import unusable_secret

    got = unusable_secret("/home/a b/data/owner_token", "does not hold a usable secret")
    assert got.problem == "/home/a b/data/owner_token does not hold a usable secret"
    assert got.fix.startswith("rm '/home/a b/data/owner_token'") and "stop working" in got.fix


def test_a_count_of_one_takes_the_singular_and_any_other_the_plural() -> None:
    """Issue 23 item 8: "1 panes"; every count the CLI prints goes through advice.counted."""
    from connectcore.advice import counted

    assert [counted(n, "pane") for n in (0, 1, 2)] == ["0 panes", "1 pane", "2 panes"]
    assert counted(1, "index entry", "index entries") == "1 index entry"
    assert counted(3, "index entry", "index entries") == "3 index entries"


def test_the_login_command_names_the_data_directory_only_when_it_is_not_the_default() -> None:
    """Claim: the page's login command runs as shown: --data-dir (quoted) only for a non-default one."""
    assert A.login_command("connectd", "/d/default", "/d/default") == "connectd token"
    assert A.login_command(".venv/bin/connectd", "/tmp/a b", "/d/default") == ".venv/bin/connectd token --data-dir '/tmp/a b'"
