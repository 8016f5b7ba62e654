"""Launchers: rules the 2026-12-06 (fourth) mutation run found unpinned.

Each test states one rule of :mod:`connectcore.launchers` through its public functions; its docstring
names the mutants it kills (docs/survivors/launchers.md lists the ones left as equivalent, with reasons).
A launcher decides the command line a real agent harness runs, so every survivor that changed a
command line, an injected variable or a refusal is pinned here.
"""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import launchers as L
from connectcore import opencode_binding as OC

URL = "http://127.0.0.1:7878/mcp"
SID = "0f8fad5b-d9cb-469f-a165-70867728950e"
FRESH = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"
CLAUDE = L.BUILTIN_LAUNCHERS["claude"]
OPENCODE = L.BUILTIN_LAUNCHERS["opencode"]
PORT_ARGS = ("--port=4242", "--hostname=127.0.0.1", "--mdns=false")


def _refused(fn: Any, *args: Any, **kw: Any) -> L.LauncherError:
    with pytest.raises(L.LauncherError) as info:
        fn(*args, **kw)
    return info.value


# ------------------------------------------------------------------------------------ the Connect offer


def _offer(**over: Any) -> L.ConnectOffer:
    base: dict[str, Any] = dict(
        connected=False, harness="claude", launcher_name="claude", launcher=CLAUDE, session_bound=True
    )
    return L.connect_offer(**{**base, **over})


def test_each_refused_connect_offer_is_disabled_false_with_its_own_words() -> None:
    """The page gets ``enabled`` as JSON (``false``, never ``null``) and the reason word for word,
    for each refusal. Kills x_connect_offer 11, 24, 40, 51, 56, 62 (``False`` -> ``None``) and 16, 29,
    30, 46, 67, 68, 70, 71 (the reasons' words)."""
    no_exit = L.Launcher("claude", "claude", argv=("claude",), resume_argv=CLAUDE.resume_argv)
    cases = {
        "shell": (_offer(harness="shell"), "A shell, not an agent: there is nothing to connect."),
        "unknown": (
            _offer(harness="unknown"),
            "connectd cannot tell which agent runs here, so it cannot offer Connect.",
        ),
        "none": (_offer(harness=None), "connectd cannot tell which agent runs here, so it cannot offer Connect."),
        "hand-started, unbound": (
            _offer(launcher_name=None, launcher=None, session_bound=False),
            "Not started by connectd, and no agent session is bound to it yet: connect it at its next "
            "launch (connectd launch … --connect observe).",
        ),
        "launcher gone": (_offer(launcher=None), "Its launcher “claude” is no longer configured."),
        "cannot restart": (
            _offer(launcher=no_exit),
            "claude has no exit command, so connectd cannot ask the agent to quit",
        ),
        "unbound": (
            _offer(session_bound=False),
            "No agent session is bound to this pane unambiguously, so a relaunch could not resume it: "
            "connect it at launch.",
        ),
    }
    for what, (offer, reason) in cases.items():
        assert offer.enabled is False, what
        assert offer == L.ConnectOffer(False, "", reason), what


# ------------------------------------------------------------------------------------- exit commands


def test_an_exit_command_may_hold_spaces_but_not_a_control_character_or_del() -> None:
    """An exit command is one line of printable text: a space inside is printable (``/exit now``),
    a control character or DEL (0x7F) is not. Kills x__has_control 6, 7 (``< 0x20`` -> ``<= 0x20``,
    ``< 33``: the space refused) and 14 (``== 0x7F`` -> ``== 128``: DEL let through)."""
    spaced = L.Launcher("c", "claude", argv=("claude",), exit_command="/exit now", resume_argv=CLAUDE.resume_argv)
    assert spaced.exit_command == "/exit now" and spaced.restartable
    for bad in ("/exit\x7f", "/exit\x1f", "/exit\nrm -rf ~"):
        error = _refused(L.Launcher, "c", "claude", argv=("claude",), exit_command=bad)
        assert error.problem == "exit_command must be one line of printable text, such as /exit", bad


# ---------------------------------------------------------------------------- Off launches (plain_plan)


def test_an_off_opencode_launch_serves_with_the_user_s_arguments_kept_whole() -> None:
    """An Off OpenCode launch of a new session serves on the daemon's port: the server's arguments go
    right after the program and every one of the user's arguments follows, in order; the plan names
    its launcher, its port and the password variable, and is not connectable. Kills x_plain_plan 39
    (``argv[1:]`` -> ``argv[2:]``: the user's first argument dropped), 40 (launcher None), 43
    (connectable None), 45 and 52 (the port not recorded)."""
    launcher = L.Launcher("oc", "opencode", argv=("opencode", "--model", "anthropic/opus", "/src/proj"))
    plan = L.plain_plan(launcher, server_port=4242)
    assert plan.argv == ("opencode", *PORT_ARGS, "--model", "anthropic/opus", "/src/proj")
    assert plan.launcher == "oc" and plan.connectable is False and plan.token_env is None
    assert plan.server_port == 4242 and plan.password_env == OC.PASSWORD_ENV


def test_an_off_launch_that_does_not_serve_names_no_password_variable() -> None:
    """Only a launch that serves gets a server password: the daemon puts one wherever
    ``password_env`` says. Kills x_plain_plan 56 (``port is not None`` -> ``... or True``)."""
    for plan in (L.plain_plan(CLAUDE), L.plain_plan(OPENCODE), L.plain_plan(L.BUILTIN_LAUNCHERS["codex"])):
        assert plan.server_port is None and plan.password_env is None, plan.launcher
        assert plan.launcher == plan.argv[0]


def test_an_off_serving_launch_refuses_a_launcher_that_sets_the_server_password() -> None:
    """connectd sets ``OPENCODE_SERVER_PASSWORD`` itself: a launcher's env that sets it is refused
    ``bad_env``, naming the launcher and the problem. Kills x_plain_plan 26 (launcher None), 27
    (problem None), 32, 33 (its words)."""
    launcher = L.Launcher("oc", "opencode", argv=("opencode",), env={OC.PASSWORD_ENV: "hunter2"})
    error = _refused(L.plain_plan, launcher, server_port=4242)
    problem = (
        "OPENCODE_SERVER_PASSWORD is set by connectd for the session binding; the launcher's env must not set it"
    )
    assert (error.launcher, error.problem, error.reason) == ("oc", problem, "bad_env")
    assert str(error) == f"launcher 'oc': {problem}"


def test_a_server_port_is_refused_for_a_launch_that_does_not_serve_naming_the_launcher() -> None:
    """A port given for a launch that does not serve (another harness, or an OpenCode argv that
    picks its session) is refused ``bad_port``, naming the launcher and why. Kills
    x__checked_server_port 8 (launcher None) and 9 (problem None)."""
    error = _refused(L.plain_plan, CLAUDE, server_port=4242)
    assert (error.launcher, error.reason) == ("claude", "bad_port")
    assert error.problem == "a server port is only for a new claude session bound by its own server"
    picks = L.Launcher("oc", "opencode", argv=("opencode", "--continue"))
    error = _refused(L.plain_plan, picks, server_port=4242)
    assert (error.launcher, error.reason) == ("oc", "bad_port")
    assert error.problem == "a server port is only for a new opencode session bound by its own server"


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_a_malformed_server_port_is_refused_naming_the_launcher_and_the_port(port: int) -> None:
    """A port outside 1..65535 is refused ``bad_port`` with opencode_binding's words (naming the
    port), Off or connected. Kills x__checked_server_port 17 (launcher None), 18 (problem None), 23
    (``str(exc)`` -> ``str(None)``)."""
    problem = f"an OpenCode server port must be an integer in 1..65535, got {port}"
    for error in (
        _refused(L.plain_plan, OPENCODE, server_port=port),
        _refused(L.inject, OPENCODE, endpoint_url=URL, server_port=port),
    ):
        assert (error.launcher, error.problem, error.reason) == ("opencode", problem, "bad_port")
        assert str(error) == f"launcher 'opencode': {problem}"


def test_a_connected_opencode_launcher_setting_the_server_address_is_refused_in_words() -> None:
    """A connected OpenCode launcher whose argv sets its server's address is refused
    ``server_flag``, naming the launcher, the flag and what to do. Kills x_check_opencode_argv 4
    (launcher None), 10, 11 (its words)."""
    launcher = L.Launcher("oc", "opencode", argv=("opencode", "--hostname=0.0.0.0"))
    error = _refused(L.inject, launcher, endpoint_url=URL, server_port=4242)
    assert (error.launcher, error.reason) == ("oc", "server_flag")
    assert error.problem == (
        "--hostname cannot be in a connected OpenCode launcher's argv: connectd sets OpenCode's server "
        "address itself (its session binding talks to it); remove it or launch with connect off"
    )


# --------------------------------------------------------------------------------------- launch_plan


def _launch(launcher: L.Launcher, **kw: Any) -> L.LaunchPlan:
    return L.launch_plan(launcher, endpoint_url=URL, fresh_session_id=FRESH, **kw)


def test_every_launch_plan_carries_the_env_overrides() -> None:
    """The ``--env`` overrides reach the plan whichever way it launches: connected new, connected
    resume, Off new, Off resume. Kills x_launch_plan 6, 10 (connected resume), 14, 19 (connected
    new), 23, 26 (Off new), 35, 37 (Off resume): each dropped them."""
    extra = {"PROJECT": "alpha"}
    cases = {
        "connected, new": _launch(CLAUDE, connect=True, session=None, extra_env=extra),
        "connected, resume": _launch(CLAUDE, connect=True, session=SID, extra_env=extra),
        "off, new": _launch(CLAUDE, connect=False, session=None, extra_env=extra),
        "off, resume": _launch(CLAUDE, connect=False, session=SID, extra_env=extra),
    }
    for what, plan in cases.items():
        assert plan.env_add.get("PROJECT") == "alpha", what


def test_a_new_opencode_launch_serves_on_the_port_given_connected_or_off() -> None:
    """``launch_plan`` hands the daemon's port on: a new OpenCode launch serves on it, connected or
    Off. Kills x_launch_plan 15, 20 (connected: the port dropped, the launch refused) and 24, 27 (Off:
    the launch no longer serving)."""
    connected = _launch(OPENCODE, connect=True, session=None, server_port=4242)
    assert connected.argv == ("opencode", *PORT_ARGS) and connected.server_port == 4242
    assert connected.password_env == OC.PASSWORD_ENV and connected.token_env == L.DEFAULT_TOKEN_ENV
    off = _launch(OPENCODE, connect=False, session=None, server_port=4242)
    assert off.argv == ("opencode", *PORT_ARGS) and off.server_port == 4242
    assert off.password_env == OC.PASSWORD_ENV and off.token_env is None


# ------------------------------------------------------------------------------------- launchers.toml

TOML_REFUSALS = [
    (
        '[launchers."bad name"]\nargv = ["claude"]',
        "name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
        "invalid",
    ),
    ('[launchers]\nx = "claude"', "must be a table with argv (or command)", "invalid"),
    ("[launchers.x]\nargv = ['claude']\nenv = 'A=1'", 'env must be a table of NAME = "value"', "bad_env"),
    ("[launchers.x]\ncommand = 'claude'\nenv = 'A=1'", 'env must be a table of NAME = "value"', "bad_env"),
    ("[launchers.x]\ncommand = ['claude']", "command must be a string", "invalid"),
    ("[launchers.x]\ncommand = 'claude'\nharness = 1", "harness must be a string", "invalid"),
    ("[launchers.x]\nargv = ['claude']\nharness = 3", "harness must be a string", "invalid"),
    (
        "[launchers.x]\nargv = ['claude']\nargs = ['-v']",
        "unknown key 'args' (expected argv, env, exit_command, harness, inject_tool_approval, resume)",
        "invalid",
    ),
    (
        "[launchers.x]\nharness = 'claude'",
        "needs argv (a list of strings) or command (an opaque shell string)",
        "invalid",
    ),
    ("[launchers.x]\nargv = []", "argv must be a non-empty list of strings", "invalid"),
    ("[launchers.x]\nargv = ['']", "argv must start with a program name", "invalid"),
    ('[launchers.x]\nargv = ["a\\u0000b"]', "argv argument 'a\\x00b' contains a NUL character", "invalid"),
    (
        "[launchers.x]\nargv = ['/usr/bin/mytool']",
        "harness is required when the program ('mytool') is not one of claude, codex, opencode",
        "invalid",
    ),
]


@pytest.mark.parametrize(("text", "problem", "reason"), TOML_REFUSALS)
def test_a_malformed_launchers_toml_entry_is_refused_with_its_whole_problem_and_reason(
    text: str, problem: str, reason: str
) -> None:
    """Each refusal of a ``[launchers.<name>]`` table, word for word, with its reason code (the CLI and
    ``serve`` print them to the person editing the file). Kills x__launcher_from_toml 7, 14 (name,
    table), 26, 29, 30, 31, 33, 34 (env not a table: words and ``bad_env``), 55, 71, 154 (command,
    harness not a string), 92 (the expected keys), 101 (argv missing), 115, 120, 121 (``argv`` named
    in the argv refusals) and 147 (the known harnesses)."""
    error = _refused(L.parse_launchers_toml, text)
    name = "bad name" if "bad name" in text else "x"
    assert (error.launcher, error.problem, error.reason) == (name, problem, reason)


def test_an_opaque_launcher_keeps_its_env() -> None:
    """An opaque (shell-string) launcher's ``env`` is kept and added to its (Off) launch. Kills
    x__launcher_from_toml 79 (the env dropped)."""
    got = L.parse_launchers_toml("[launchers.old]\ncommand = 'cd ~/src && claude'\nenv = { PROJECT = 'alpha' }\n")
    assert got["old"].env == {"PROJECT": "alpha"}
    plan = L.plain_plan(got["old"])
    assert plan.argv == ("/bin/sh", "-c", "cd ~/src && claude") and plan.env_add == {"PROJECT": "alpha"}
