"""What connect tells a stuck person: rules the 2026-12-06 (fourth) mutation run found unpinned.

Each test states one rule of :mod:`connectcore.advice` through its public functions; its docstring
names the mutants it kills (docs/survivors/advice.md lists the ones left as equivalent, with reasons).
The words are what the person reads and the commands are what they paste, so they are pinned whole.
"""

from __future__ import annotations

from connectcore import advice as A
from connectcore.releases import VERIFIED, version_tuple


def test_with_no_program_path_the_printed_command_is_the_interpreter_s_module() -> None:
    """``sys.argv[0]`` may be empty (the daemon passes ``""`` then): the command is then
    ``python -m connectd.cli``, never an error. Kills x_cli_command 13 (``[-1]`` -> ``[+1]``: an
    IndexError on a path with no ``/``)."""
    assert A.cli_command(running="", on_path=None, python="/v/bin/python") == "/v/bin/python -m connectd.cli"
    assert A.cli_command(running="", on_path="/usr/bin/connectd", python="/p") == "/p -m connectd.cli"


def test_run_says_each_mode_in_its_own_words() -> None:
    """The three lines ``connectd run`` prints, whole (the demo's socket is ``tmux -L``, the flag that
    names a socket; ``-l`` is another one). Kills x_run_mode_line 4, 9 (words) and 7 (``-L`` -> ``-l``)."""
    assert A.run_mode_line(A.RunMode.SERVE, tmux_server_running=True, cli="c") == (
        "connectd run: a tmux server is running, so this serves your own fleet (as `connectd serve`); "
        "for the isolated demo instead: `c run --demo` (or `make demo`)"
    )
    assert A.run_mode_line(A.RunMode.DEMO, tmux_server_running=True, cli="c") == (
        "connectd run --demo: an isolated demo fleet on its own tmux server (tmux -L connect-demo); "
        "your tmux server is left alone"
    )
    assert A.run_mode_line(A.RunMode.DEMO, tmux_server_running=False, cli="c") == (
        "connectd run: no tmux server is running, so this starts an isolated demo fleet on its own tmux server "
        "(tmux -L connect-demo); to serve your own fleet, start tmux and run `c run` again"
    )


def test_a_port_in_use_without_a_known_holder_says_nothing_more() -> None:
    """``serve`` reports a busy port without knowing who holds it (no ``why``): the problem is then
    the bare sentence, with no parenthesis. Kills x_port_in_use 1 (the default ``why`` not empty), 6
    (the parenthesis always) and 7 (``"XXXX"`` in its place)."""
    assert A.port_in_use(7878, cli="c") == A.Advice(
        "127.0.0.1:7878 is in use by another program",
        "see who holds it (`ss -ltnp 'sport = :7878'`) or run connectd with another --port (`c serve --port 7879`)",
    )


def test_a_second_daemon_on_one_data_directory_is_told_what_it_needs() -> None:
    """Kills x_daemon_running 8, 9 (the fix's words)."""
    assert A.daemon_running("/d b", "c").fix == (
        "use that one (`c agents --data-dir '/d b'`), or stop it first; "
        "a second daemon needs its own --data-dir and --port"
    )


def test_an_unusable_secret_s_fix_says_what_stops_working() -> None:
    """Kills x_unusable_secret 6 (the fix's words)."""
    assert A.unusable_secret("/d/owner_token", "is empty").fix == (
        "rm /d/owner_token  (the next start makes a new one; page logins and links made with the "
        "old one stop working)"
    )


def test_the_fleet_warnings_problems_are_whole_and_the_install_names_the_newest_verified_release() -> None:
    """No tmux server and no harness: each problem in its words; the install suggests the first
    harness's newest verified release (newest by version, whatever the table's order). Kills
    x_fleet_warnings 6, 12, 13 (the tmux problem), 22, 29 (the harness problem), 30, 31 (an older
    release suggested: ``verified[+1]``, ``verified[-2]``)."""
    tmux, harness = A.fleet_warnings(tmux_server_running=False, harnesses_on_path=(), cli="c")
    assert tmux.problem == (
        "no tmux server is running: connectd sees agents only in tmux panes, so there is nothing to show yet"
    )
    assert harness.problem == (
        "no agent harness on PATH (claude, codex, opencode): there is no agent to launch or connect"
    )
    package, verified = VERIFIED["claude"]
    newest = max(verified, key=version_tuple)
    assert len(verified) > 2  # else the older releases could not be told from the newest
    assert harness.fix == (
        f"install one, e.g. `npm install -g {package}@{newest}` (a verified release; see docs/compatibility.md)"
    )


def test_with_another_program_on_the_port_the_fix_starts_a_daemon_on_this_data_directory() -> None:
    """The fix names the data directory asked about (quoted) and the next port. Kills x_no_daemon 17
    (``shlex.quote(None)``: ``''``)."""
    taken = A.no_daemon("/home/u/my data", 7878, served_elsewhere=None, port_taken=True, cli="c")
    assert taken == A.Advice(
        "no daemon is running on /home/u/my data, and another program holds port 7878",
        "start one on another port: `c serve --data-dir '/home/u/my data' --port 7879`",
    )


def test_a_hand_started_agent_connected_in_place_is_told_in_words_how_to_get_its_tools() -> None:
    """The note the page and the CLI show, whole. Kills x_receive_only_note 3, 4 (its words)."""
    assert A.receive_only_note(started_by_connect=False, harness="codex", session_id="019a") == (
        "connected: receives now; connect did not start it, so its tools arrive once it runs under connect: "
        "quit it and run `connectd launch --here codex --session 019a` in its pane"
    )


def test_a_launch_with_no_tmux_session_is_refused_with_its_fix() -> None:
    """``launch`` with no tmux session to open a window in: the problem and the two ways out. Kills
    x_no_tmux_session 3-8 (no test ran them: the problem or the fix None, left out, or reworded)."""
    assert A.no_tmux_session("c") == A.Advice(
        "no tmux session to open a window in",
        "start tmux (`tmux new-session -d -s main`), or run the agent in your own tmux pane: `c launch --here LAUNCHER`",
    )


def test_an_advice_s_fix_line_is_not_indented_unless_asked() -> None:
    """The CLI's error (connectd/cli/main.py, ``CliError``) prints ``lines()`` with no indent: the fix
    line starts with ``fix:``. Kills xǁAdviceǁlines 1 (the default indent not empty)."""
    assert A.Advice("p", "do this").lines() == ["p", "fix: do this"]
    assert A.Advice("p", "do this").lines("  ") == ["p", "  fix: do this"]
