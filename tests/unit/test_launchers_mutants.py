"""Launchers: rules the 2026-12-06 (fourth) mutation run found unpinned.

Each test states one rule of :mod:`connectcore.launchers` through its public functions; its docstring
names the mutants it kills (docs/survivors/launchers.md lists the ones left as equivalent, with reasons).
A launcher decides the command line a real agent harness runs, so every survivor that changed a
command line, an injected variable or a refusal is pinned here.
"""

from __future__ import annotations

import json
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


# ---------------------------------------------------------------------------------- stop 34: the value


def _whole(error: L.LauncherError) -> tuple[str | None, str, str]:
    return (error.launcher, error.problem, error.reason)


NAME_RULE = "name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"


def test_a_launcher_value_with_a_malformed_name_is_refused_naming_it() -> None:
    """A launcher is refused at construction (not only from launchers.toml) when its name is not
    1-64 letters, digits, ``_ . -``; the refusal names the name given. Kills x__check_launcher 2
    (``or`` -> ``and``: a malformed string name let through), 6 (launcher None), 7 (problem None), 8,
    9 (the problem dropped), 10 (``str(None)``), 11, 12 (its words)."""
    for bad in ("bad name", "-x", "x" * 65, ""):
        assert _whole(_refused(L.Launcher, bad, "claude", argv=("claude",))) == (bad, NAME_RULE, "invalid")
    assert _whole(_refused(L.Launcher, 7, "claude", argv=("claude",))) == ("7", NAME_RULE, "invalid")


def test_an_opaque_command_is_refused_when_empty_or_holding_a_nul() -> None:
    """An opaque (shell-string) command must be non-empty and hold no NUL character (a NUL would cut
    the shell's command short); from launchers.toml too. Kills x__check_launcher 33 (the empty
    command's words), 35 (the NUL test looking for ``XX\\x00XX``: a NUL let through), 37 (launcher
    None), 38 (problem None), 39, 40 (the problem dropped), 41, 42, 43 (its words)."""
    error = _refused(L.Launcher, "old", "claude", opaque="   ")
    assert _whole(error) == ("old", "command must be a non-empty string", "invalid")
    nul = ("old", "command contains a NUL character", "invalid")
    assert _whole(_refused(L.Launcher, "old", "claude", opaque="claude\x00; rm -rf ~")) == nul
    assert _whole(_refused(L.parse_launchers_toml, '[launchers.old]\ncommand = "claude\\u0000x"')) == nul
    assert str(_refused(L.Launcher, "old", "claude", opaque="\x00")) == "launcher 'old': command contains a NUL character"


def test_an_opaque_launcher_may_not_also_have_argv_or_resume() -> None:
    """An opaque launcher is a shell string only: one that also has argv, or resume, or both, is
    refused, naming it. Kills x__check_launcher 44 (``or`` -> ``and``: argv alone or resume alone let
    through), 45 (launcher None), 46 (problem None), 47, 48 (the problem dropped), 49, 50 (its words)."""
    problem = ("old", "an opaque command launcher cannot also have argv or resume", "invalid")
    resume = ("claude", "--resume", "{session_id}")
    assert _whole(_refused(L.Launcher, "old", "claude", argv=("claude",), opaque="claude")) == problem
    assert _whole(_refused(L.Launcher, "old", "claude", resume_argv=resume, opaque="claude")) == problem
    assert _whole(_refused(L.Launcher, "old", "claude", argv=("claude",), resume_argv=resume, opaque="claude")) == problem


def test_a_structured_launcher_s_argv_and_resume_are_checked_naming_which() -> None:
    """A structured launcher's argv must be a non-empty tuple of strings and so must its resume
    template; each refusal names the launcher and which list is wrong (argv or resume), from
    launchers.toml too for resume. Kills x__check_launcher 51 (launcher None), 52 (``what`` None), 57,
    58 (``argv`` reworded), 59, 60, 65, 66 (the same for ``resume``) and x__check_argv 9 (launcher
    None), 10 (problem None), 11, 12 (the problem dropped) for a non-string argument."""
    assert _whole(_refused(L.Launcher, "x", "claude")) == ("x", "argv must be a non-empty list of strings", "invalid")
    error = _refused(L.Launcher, "x", "claude", argv=("claude", 3))
    assert _whole(error) == ("x", "argv must hold only strings, got 3", "invalid")
    error = _refused(L.Launcher, "x", "claude", argv=("claude",), resume_argv=("claude", None))
    assert _whole(error) == ("x", "resume must hold only strings, got None", "invalid")
    error = _refused(L.parse_launchers_toml, "[launchers.x]\nargv = ['claude']\nresume = [' ', '{session_id}']")
    assert _whole(error) == ("x", "resume must start with a program name", "invalid")


def test_exit_command_and_tool_approval_refusals_have_their_words() -> None:
    """The exit command and ``inject_tool_approval`` refusals from launchers.toml, word for word.
    Kills x__check_launcher 86 (the exit command's words) and 93 (the approval's words)."""
    error = _refused(L.parse_launchers_toml, "[launchers.x]\nargv = ['claude']\nexit_command = ' '")
    assert _whole(error) == ("x", "exit_command must be one line of printable text, such as /exit", "invalid")
    error = _refused(L.parse_launchers_toml, "[launchers.x]\nargv = ['claude']\ninject_tool_approval = 'yes'")
    assert _whole(error) == ("x", "inject_tool_approval must be true or false", "invalid")


def test_a_launcher_s_env_refusals_name_the_launcher_env_and_the_problem() -> None:
    """A launcher's env must be a mapping of valid names to strings without NUL; each refusal names
    the launcher and ``env``. Kills x__check_env 1, 2 (the default ``what`` reworded), 4 (launcher
    None), 5 (problem None), 6, 7 (the problem dropped), 31 (launcher None), 32 (problem None) for
    a NUL. An env that is no table is ``bad_env`` as in launchers.toml (it was ``invalid`` built
    directly, one refusal with two reasons, until stop 34)."""
    error = _refused(L.Launcher, "x", "claude", argv=("claude",), env="A=1")
    assert _whole(error) == ("x", 'env must be a table of NAME = "value"', "bad_env")
    error = _refused(L.Launcher, "x", "claude", argv=("claude",), env={"1A": "v"})
    assert _whole(error) == ("x", "env: '1A' is not a valid environment variable name", "bad_env")
    error = _refused(L.parse_launchers_toml, '[launchers.x]\nargv = ["claude"]\nenv = { A = "a\\u0000b" }')
    assert _whole(error) == ("x", "env: A contains a NUL character", "bad_env")


def test_an_env_override_refusal_names_the_launcher_and_env_flag() -> None:
    """A bad ``--env`` override is refused ``bad_env`` naming the launcher and ``--env`` (not the
    launcher's ``env``), Off or connected. Kills x__merged_env 1 (launcher None), 3, 6, 7, 8 (``--env``
    reworded or replaced by ``env``)."""
    for plan in (L.plain_plan, lambda lr, **kw: L.inject(lr, endpoint_url=URL, **kw)):
        error = _refused(plan, CLAUDE, extra_env={"1A": "v"})
        assert _whole(error) == ("claude", "--env: '1A' is not a valid environment variable name", "bad_env")
        error = _refused(plan, CLAUDE, extra_env={"A": "a\x00"})
        assert _whole(error) == ("claude", "--env: A contains a NUL character", "bad_env")


# ------------------------------------------------------------------------------- stop 34: the endpoint


def test_the_endpoint_port_is_at_most_65535_and_a_non_string_is_refused() -> None:
    """The MCP endpoint's port is 1..65535: 65536 is refused ``bad_endpoint`` (it fits the pattern's
    five digits); a URL that is not a string is refused the same way (not a TypeError). Kills
    x_check_endpoint 14 (``<= 65536``) and 3 (the ``isinstance`` test made always true)."""
    assert L.check_endpoint("http://127.0.0.1:65535/mcp") == "http://127.0.0.1:65535/mcp"
    for bad in ("http://127.0.0.1:65536/mcp", None, 7878):
        error = _refused(L.check_endpoint, bad)
        assert (error.launcher, error.reason) == (None, "bad_endpoint")
        assert error.problem == f"the endpoint must be http://127.0.0.1:PORT/mcp with an explicit port, got {bad!r}"


def test_a_bad_token_variable_is_refused_in_words() -> None:
    """A token variable that is not an environment variable name is refused ``bad_env``, saying so.
    Kills x__token_env 5 (problem None)."""
    error = _refused(L.inject, CLAUDE, endpoint_url=URL, token_env="1BAD")
    assert _whole(error) == (None, "token_env '1BAD' is not a valid environment variable name", "bad_env")


# -------------------------------------------------------------------- stop 34: injection and plans


def test_opencode_reads_the_token_from_the_variable_the_plan_names() -> None:
    """The token variable the plan names is the one OpenCode's injected config reads the token from
    (else the daemon would put the token where OpenCode never looks). Kills x_harness_injection 59
    (the config built with the default ``CONNECT_TOKEN`` whatever the token variable)."""
    plan = L.inject(OPENCODE, endpoint_url=URL, token_env="MY_TOKEN", server_port=4242)
    config = json.loads(plan.env_add["OPENCODE_CONFIG_CONTENT"])
    assert plan.token_env == "MY_TOKEN"
    assert config["mcp"]["connect"]["headers"] == {"Authorization": "Bearer {env:MY_TOKEN}"}


def test_a_bad_port_given_to_the_opencode_injection_is_refused_naming_the_port() -> None:
    """The OpenCode injection refuses a port outside 1..65535 ``bad_port`` with opencode_binding's
    words. Kills x_harness_injection 42 (problem None) and 47 (``str(None)``)."""
    error = _refused(L.harness_injection, "opencode", endpoint_url=URL, server_port=70000)
    assert _whole(error) == (None, "an OpenCode server port must be an integer in 1..65535, got 70000", "bad_port")


def test_a_session_flag_with_an_equals_sign_in_its_value_still_picks_the_session() -> None:
    """``--flag=value`` picks a session by the part before the first ``=``, whatever the value holds
    (a pull request URL with a query): no session id is then preset, connected or Off. Kills
    x__session_picked 11 (``rsplit``: the flag read as ``--from-pr=https://...?a``)."""
    launcher = L.Launcher("c", "claude", argv=("claude", "--from-pr=https://example.com/o/r/pull/1?tab=files"))
    plan = L.inject(launcher, endpoint_url=URL, session_id=SID)
    assert plan.session_id is None and not any(a.startswith("--session-id") for a in plan.argv)
    assert L.off_session_presettable(launcher) is False


def test_a_connected_opencode_resume_refuses_a_server_flag_naming_the_launcher() -> None:
    """A connected OpenCode relaunch whose resume template sets the server's address is refused
    ``server_flag``, naming the launcher. Kills x__connected_plan 4 (launcher None)."""
    launcher = L.Launcher(
        "oc", "opencode", argv=("opencode",), exit_command="/exit",
        resume_argv=("opencode", "--port=9999", "--session", "{session_id}"),
    )
    error = _refused(L.resume_plan, launcher, "ses_abc123", endpoint_url=URL)
    assert (error.launcher, error.reason) == ("oc", "server_flag")
    assert error.problem.startswith("--port cannot be in a connected OpenCode launcher's argv")


def test_a_connected_launch_refuses_a_launcher_env_holding_the_token_or_injected_variables() -> None:
    """A connected launch is refused ``bad_env``, naming the launcher, when its env sets the token
    variable or a variable the injection sets. Kills x__connected_plan 25 and 45 (launcher None)."""
    token = L.Launcher("c", "claude", argv=("claude",), env={"CONNECT_TOKEN": "x"})
    assert _whole(_refused(L.inject, token, endpoint_url=URL)) == (
        "c", "CONNECT_TOKEN is connectd's token variable; the launcher's env and --env must not set it", "bad_env"
    )
    config = L.Launcher("oc", "opencode", argv=("opencode",), env={"OPENCODE_CONFIG_CONTENT": "{}"})
    assert _whole(_refused(L.inject, config, endpoint_url=URL, server_port=4242)) == (
        "oc", "OPENCODE_CONFIG_CONTENT is set by the connect injection; the launcher's env must not set it", "bad_env"
    )


def test_only_an_opencode_launch_reserves_the_server_password_variable() -> None:
    """``OPENCODE_SERVER_PASSWORD`` is connectd's only for an OpenCode launch; another harness's
    launcher may set it (it reaches the launch as any other variable). Kills x__connected_plan 37
    (reserved for every harness: a Claude launch refused)."""
    launcher = L.Launcher("c", "claude", argv=("claude",), env={OC.PASSWORD_ENV: "p"})
    plan = L.inject(launcher, endpoint_url=URL)
    assert plan.env_add[OC.PASSWORD_ENV] == "p" and plan.password_env is None
    opencode = L.Launcher("oc", "opencode", argv=("opencode",), env={OC.PASSWORD_ENV: "p"})
    assert _refused(L.inject, opencode, endpoint_url=URL, server_port=4242).reason == "bad_env"


def test_a_connected_plan_names_its_launcher() -> None:
    """Every connected plan names the launcher it runs. Kills x__connected_plan 61 (launcher None)."""
    named = L.Launcher("claude-work", "claude", argv=("claude",))
    assert L.inject(named, endpoint_url=URL).launcher == "claude-work"
    assert L.resume_plan(CLAUDE, SID, endpoint_url=URL).launcher == "claude"


def test_a_connected_opencode_launch_without_its_port_is_refused_in_words() -> None:
    """A new connected OpenCode launch needs the daemon's loopback port: without it, refused
    ``bad_port`` naming the launcher. Kills x_inject 20 (launcher None)."""
    assert _whole(_refused(L.inject, OPENCODE, endpoint_url=URL)) == (
        "opencode", "a connected opencode launch needs the loopback port connectd picked for its server", "bad_port"
    )


def test_a_preset_session_id_that_is_not_a_uuid_is_refused_in_words() -> None:
    """Claude's preset session id must be a UUID: else refused ``bad_session_id``, naming the
    launcher and the id. Kills x_inject 56 (launcher None) and 57 (problem None)."""
    assert _whole(_refused(L.inject, CLAUDE, endpoint_url=URL, session_id="not-a-uuid")) == (
        "claude", "a preset claude session id must be a UUID, got 'not-a-uuid'", "bad_session_id"
    )


def test_resume_refusals_name_the_launcher_and_the_problem() -> None:
    """The refusals of a resume (malformed id, a non-OpenCode id for OpenCode, no resume template,
    a launcher that cannot be restarted) name the launcher and the problem. Kills x_resume_argv 5, 6
    (malformed id), 19, 20 (OpenCode's id), 28, 29 (no resume command: an Off resume) and x_resume_plan
    2 (launcher None)."""
    assert _whole(_refused(L.resume_argv, CLAUDE, "a b")) == ("claude", "malformed session id 'a b'", "bad_session_id")
    assert _whole(_refused(L.resume_argv, OPENCODE, SID)) == (
        "opencode", f"an OpenCode session id looks like ses_..., got {SID!r}", "bad_session_id"
    )
    no_resume = L.Launcher("n", "claude", argv=("claude",), exit_command="/exit")
    assert _whole(_refused(_launch, no_resume, connect=False, session=SID)) == (
        "n", "n has no resume command", "not_restartable"
    )
    assert _whole(_refused(L.resume_plan, no_resume, SID, endpoint_url=URL)) == (
        "n", "n has no resume command, so it can only be connected at launch", "not_restartable"
    )
