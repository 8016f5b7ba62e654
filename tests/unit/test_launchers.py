"""Launchers: built-ins, launchers.toml, per-harness injection, resume plans, and their refusals.

The property tests at the end state each invariant in one line.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from connectcore.launchers import (
    BUILTIN_LAUNCHERS,
    OPAQUE_REASON,
    Launcher,
    LauncherError,
    _connected_plan,
    builtin_launchers,
    check_endpoint,
    claude_mcp_config,
    harness_injection,
    inject,
    opencode_config_content,
    parse_launchers_toml,
    plain_plan,
    resume_argv,
    resume_plan,
    toml_string,
)

URL = "http://127.0.0.1:7878/mcp"
SID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def launcher_error(fn: object, *args: object, **kw: object) -> LauncherError:
    with pytest.raises(LauncherError) as info:
        fn(*args, **kw)  # type: ignore[operator]
    return info.value


# ------------------------------------------------------------------------------------------ built-ins


def test_builtin_launchers() -> None:
    b = builtin_launchers()
    assert set(b) == {"claude", "codex", "opencode"}
    claude, codex, opencode = b["claude"], b["codex"], b["opencode"]
    assert claude.argv == ("claude",) and claude.exit_command == "/exit"
    assert claude.resume_argv == ("claude", "--resume", "{session_id}")
    assert codex.argv == ("codex",) and codex.exit_command == "/quit"
    assert codex.resume_argv == ("codex", "resume", "{session_id}")
    assert claude.connectable and codex.connectable and claude.restartable and codex.restartable
    assert opencode.connectable and opencode.restartable  # bound through its own server (opencode_binding)
    assert opencode.exit_command == "/exit" and opencode.resume_argv == ("opencode", "--session", "{session_id}")
    assert b is not builtin_launchers() and b == dict(BUILTIN_LAUNCHERS)


# ---------------------------------------------------------------------------------------- injection


def test_claude_injection() -> None:
    plan = inject(BUILTIN_LAUNCHERS["claude"], endpoint_url=URL, session_id=SID)
    assert plan.connectable and plan.reason == "" and plan.token_env == "CONNECT_TOKEN"
    assert plan.session_id == SID and plan.env_add == {}
    assert plan.argv[0] == "claude"
    config = plan.argv[1]
    assert config.startswith("--mcp-config=")
    assert json.loads(config.removeprefix("--mcp-config=")) == {
        "mcpServers": {
            "connect": {"type": "http", "url": URL, "headers": {"Authorization": "Bearer ${CONNECT_TOKEN}"}}
        }
    }
    assert plan.argv[2:] == ("--allowedTools=mcp__connect", f"--session-id={SID}")


def test_claude_without_tool_approval_and_without_preset() -> None:
    launcher = Launcher("c", "claude", argv=("claude", "--model", "opus"), inject_tool_approval=False)
    plan = inject(launcher, endpoint_url=URL, session_id=None)
    assert plan.session_id is None
    assert [a for a in plan.argv if a.startswith("--allowedTools")] == []
    assert plan.argv[0] == "claude" and plan.argv[-2:] == ("--model", "opus")


@pytest.mark.parametrize("flag", ["--resume", "-r", "--continue", "-c", "--session-id", "--resume=abc"])
def test_claude_does_not_preset_when_the_user_argv_picks_a_session(flag: str) -> None:
    plan = inject(Launcher("c", "claude", argv=("claude", flag)), endpoint_url=URL, session_id=SID)
    assert plan.session_id is None and not any(a.startswith("--session-id=") for a in plan.argv)


def test_claude_flag_after_double_dash_is_not_a_session_flag() -> None:
    plan = inject(Launcher("c", "claude", argv=("claude", "--", "-c")), endpoint_url=URL, session_id=SID)
    assert plan.session_id == SID


def test_codex_injection_values_are_toml() -> None:
    plan = inject(BUILTIN_LAUNCHERS["codex"], endpoint_url=URL, token_env="MY_TOKEN", session_id=SID)
    assert plan.connectable and plan.session_id is None and plan.token_env == "MY_TOKEN"
    assert plan.argv == (
        "codex",
        "-c",
        'mcp_servers.connect.url="http://127.0.0.1:7878/mcp"',
        "-c",
        'mcp_servers.connect.bearer_token_env_var="MY_TOKEN"',
        "-c",
        'mcp_servers.connect.default_tools_approval_mode="approve"',
    )
    off = inject(Launcher("x", "codex", argv=("codex",), inject_tool_approval=False), endpoint_url=URL)
    assert not any("approval" in a for a in off.argv)


def test_opencode_is_connected_with_its_config_and_its_own_server() -> None:
    content = json.loads(opencode_config_content(URL))
    assert content == {
        "mcp": {
            "connect": {
                "type": "remote",
                "url": URL,
                "headers": {"Authorization": "Bearer {env:CONNECT_TOKEN}"},
            }
        }
    }
    assert harness_injection("opencode", endpoint_url=URL).env == {
        "OPENCODE_CONFIG_CONTENT": opencode_config_content(URL)
    }
    plan = inject(BUILTIN_LAUNCHERS["opencode"], endpoint_url=URL, server_port=4242)
    assert plan.connectable and plan.reason == "" and plan.token_env == "CONNECT_TOKEN"
    assert plan.argv == ("opencode", "--port=4242", "--hostname=127.0.0.1", "--mdns=false")
    assert plan.env_add == {"OPENCODE_CONFIG_CONTENT": opencode_config_content(URL)}
    assert plan.server_port == 4242 and plan.password_env == "OPENCODE_SERVER_PASSWORD"
    assert plan.session_id is None  # learnt from the server after the launch


def test_env_add_holds_launcher_env_then_overrides_and_never_a_token() -> None:
    launcher = Launcher("c", "claude", argv=("claude",), env={"A": "1", "B": "2"})
    plan = inject(launcher, endpoint_url=URL, extra_env={"B": "3", "HOME": "/tmp/h"})
    assert plan.env_add == {"A": "1", "B": "3", "HOME": "/tmp/h"}
    assert launcher.env == {"A": "1", "B": "2"}  # the launcher is unchanged


def test_token_variable_may_not_be_set_by_launcher_or_env_override() -> None:
    err = launcher_error(
        inject, BUILTIN_LAUNCHERS["codex"], endpoint_url=URL, extra_env={"CONNECT_TOKEN": "x"}
    )
    assert err.reason == "bad_env" and "CONNECT_TOKEN" in str(err)
    launcher = Launcher("c", "claude", argv=("claude",), env={"T": "x"})
    assert launcher_error(inject, launcher, endpoint_url=URL, token_env="T").reason == "bad_env"


def test_injected_variable_may_not_be_set_by_the_launcher() -> None:
    launcher = Launcher("o", "opencode", argv=("opencode",), env={"OPENCODE_CONFIG_CONTENT": "{}"})
    # No built-in connectable harness injects environment today (OpenCode's launch is unconnectable),
    # so this guard is reached through the internal step every connected plan goes through.
    err = launcher_error(
        _connected_plan,
        launcher,
        ("opencode",),
        endpoint_url=URL,
        token_env="CONNECT_TOKEN",
        session_id=None,
        extra_env={},
    )
    assert "OPENCODE_CONFIG_CONTENT" in str(err)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/mcp",
        "http://localhost:7878/mcp",
        "https://127.0.0.1:7878/mcp",
        "http://127.0.0.1:7878/",
        "http://127.0.0.1:0/mcp",
        "http://127.0.0.1:70000/mcp",
        "http://10.0.0.1:7878/mcp",
        "http://127.0.0.1:7878/mcp?x",
    ],
)
def test_endpoint_must_be_loopback_with_explicit_port(url: str) -> None:
    err = launcher_error(inject, BUILTIN_LAUNCHERS["claude"], endpoint_url=url)
    assert err.reason == "bad_endpoint" and url in str(err) and str(err).startswith("the endpoint must be")
    assert check_endpoint("http://127.0.0.1:65535/mcp")


@pytest.mark.parametrize("bad", ["", "1X", "A-B", "A B", "$X"])
def test_bad_token_env_name_is_refused(bad: str) -> None:
    assert (
        launcher_error(inject, BUILTIN_LAUNCHERS["claude"], endpoint_url=URL, token_env=bad).reason
        == "bad_env"
    )
    with pytest.raises(LauncherError) as info:
        claude_mcp_config(URL, bad)
    assert not str(info.value).startswith("launchers.toml")  # not a file problem


@pytest.mark.parametrize("env", [{"1A": "x"}, {"A": "x\x00y"}, {"A": 3}])
def test_bad_env_override_is_refused(env: dict[str, object]) -> None:
    err = launcher_error(inject, BUILTIN_LAUNCHERS["claude"], endpoint_url=URL, extra_env=env)
    assert err.reason == "bad_env"


@pytest.mark.parametrize("sid", ["not-a-uuid", "0f8fad5b", "--resume", ""])
def test_claude_preset_session_id_must_be_a_uuid(sid: str) -> None:
    err = launcher_error(inject, BUILTIN_LAUNCHERS["claude"], endpoint_url=URL, session_id=sid)
    assert err.reason == "bad_session_id"


def test_unknown_harness_has_no_injection() -> None:
    launcher = Launcher("g", "gemini", argv=("gemini",))
    assert not launcher.connectable and "gemini" in launcher.unconnectable_reason
    err = launcher_error(inject, launcher, endpoint_url=URL)  # refused, never its plain launch
    assert err.reason == "unconnectable" and str(err) == f"g cannot be connected: {launcher.unconnectable_reason}"
    with pytest.raises(LauncherError, match="gemini"):
        harness_injection("gemini", endpoint_url=URL)


# ------------------------------------------------------------------------------------------- opaque


def test_opaque_launcher_is_runnable_but_never_connectable() -> None:
    launcher = Launcher("old", "claude", opaque="cd ~/src && claude --foo", env={"A": "1"})
    assert not launcher.connectable and launcher.unconnectable_reason == OPAQUE_REASON
    assert not launcher.restartable and launcher.restart_refusal == OPAQUE_REASON
    assert launcher_error(inject, launcher, endpoint_url=URL, session_id=SID).reason == "unconnectable"
    plan = plain_plan(launcher)
    assert plan.argv == ("/bin/sh", "-c", "cd ~/src && claude --foo") and plan.env_add == {"A": "1"}
    assert not plan.connectable and plan.reason == OPAQUE_REASON and plan.token_env is None
    err = launcher_error(resume_plan, launcher, SID, endpoint_url=URL)
    assert err.reason == "not_restartable" and "opaque" in str(err)


def test_plain_plan_for_connect_off() -> None:
    plan = plain_plan(BUILTIN_LAUNCHERS["claude"], extra_env={"X": "1"})
    assert plan.argv == ("claude",) and plan.env_add == {"X": "1"} and not plan.connectable
    assert plan.reason == "launched with connect off"


# ------------------------------------------------------------------------------------------- resume


def test_resume_plans() -> None:
    claude = resume_plan(BUILTIN_LAUNCHERS["claude"], SID, endpoint_url=URL)
    assert claude.argv[0] == "claude" and claude.argv[-2:] == ("--resume", SID)
    assert claude.argv[1].startswith("--mcp-config=") and claude.session_id == SID and claude.connectable
    codex = resume_plan(BUILTIN_LAUNCHERS["codex"], "019a-thread", endpoint_url=URL, extra_env={"A": "b"})
    assert codex.argv[0] == "codex" and codex.argv[1] == "-c" and codex.argv[-2:] == ("resume", "019a-thread")
    assert codex.env_add == {"A": "b"} and codex.session_id == "019a-thread"


def test_resume_template_placeholder_inside_an_argument() -> None:
    launcher = Launcher(
        "c",
        "claude",
        argv=("claude",),
        resume_argv=("claude", "--resume={session_id}", "--x"),
        exit_command="/exit",
    )
    assert resume_argv(launcher, "abc") == ("claude", "--resume=abc", "--x")


@pytest.mark.parametrize("sid", ["", "-x", "a b", "a;b", "x" * 200, "a{session_id}"])
def test_malformed_resume_session_id_is_refused(sid: str) -> None:
    err = launcher_error(resume_plan, BUILTIN_LAUNCHERS["codex"], sid, endpoint_url=URL)
    assert err.reason == "bad_session_id"


def test_not_restartable_launchers_are_refused_with_the_reason() -> None:
    no_resume = Launcher("n", "claude", argv=("claude",), exit_command="/exit")
    err = launcher_error(resume_plan, no_resume, SID, endpoint_url=URL)
    assert err.reason == "not_restartable" and "no resume command" in str(err)
    no_exit = Launcher("n", "codex", argv=("codex",), resume_argv=("codex", "resume", "{session_id}"))
    assert "no exit command" in str(launcher_error(resume_plan, no_exit, SID, endpoint_url=URL))
    # OpenCode is restartable, but only onto one of its own session ids (ses_...)
    assert launcher_error(resume_plan, BUILTIN_LAUNCHERS["opencode"], SID, endpoint_url=URL).reason == "bad_session_id"
    assert launcher_error(resume_argv, no_resume, SID).reason == "not_restartable"


# ------------------------------------------------------------------------------------- launchers.toml


def test_empty_file_gives_the_builtins() -> None:
    assert parse_launchers_toml("") == builtin_launchers()


def test_user_launchers_structured_and_opaque() -> None:
    text = """
[launchers.claude-work]
argv = ["claude", "--model", "opus"]
env = { CLAUDE_CONFIG_DIR = "/home/me/.claude-work" }

[launchers.codex-fast]
harness = "codex"
argv = ["/opt/bin/codex", "-m", "fast"]
resume = ["/opt/bin/codex", "resume", "{session_id}"]
exit_command = "/exit"
inject_tool_approval = false

[launchers.old]
command = "cd ~/src && claude"

[launchers.aider]
harness = "aider"
argv = ["aider"]

[launchers.claude]
argv = ["claude", "--verbose"]
"""
    got = parse_launchers_toml(text)
    assert set(got) == {"claude", "codex", "opencode", "claude-work", "codex-fast", "old", "aider"}
    work = got["claude-work"]
    assert work.harness == "claude" and work.argv == ("claude", "--model", "opus")
    assert work.env == {"CLAUDE_CONFIG_DIR": "/home/me/.claude-work"}
    assert work.exit_command == "/exit" and work.resume_argv == ("claude", "--resume", "{session_id}")
    assert work.connectable and work.restartable and work.inject_tool_approval
    fast = got["codex-fast"]
    assert fast.exit_command == "/exit" and not fast.inject_tool_approval and fast.restartable
    assert got["old"].opaque == "cd ~/src && claude" and not got["old"].connectable
    assert got["aider"].resume_argv == () and not got["aider"].connectable and not got["aider"].restartable
    assert got["claude"].argv == ("claude", "--verbose")  # a user entry replaces the built-in
    assert got["codex"] == BUILTIN_LAUNCHERS["codex"]


def test_harness_inferred_from_program_path() -> None:
    got = parse_launchers_toml('[launchers.x]\nargv = ["/usr/local/bin/codex"]\n')
    assert got["x"].harness == "codex" and got["x"].exit_command == "/quit"
    assert got["x"].resume_argv == ("/usr/local/bin/codex", "resume", "{session_id}")


def test_empty_resume_means_no_resume() -> None:
    got = parse_launchers_toml('[launchers.x]\nargv = ["claude"]\nresume = []\n')
    assert got["x"].resume_argv == () and not got["x"].restartable and got["x"].connectable


BAD_TOML = [
    ("launchers = [", None, "not valid TOML"),
    ("foo = 1", None, "unknown top-level key 'foo'"),
    ("launchers = 3", None, "launchers must be a table"),
    ('[launchers."bad name"]\nargv = ["claude"]', "bad name", "name must be"),
    ('[launchers]\nx = "claude"', "x", "must be a table"),
    ("[launchers.x]\nharness = 'claude'", "x", "needs argv"),
    ("[launchers.x]\nargv = []", "x", "non-empty list"),
    ("[launchers.x]\nargv = 'claude'", "x", "argv must be a list of strings"),
    ("[launchers.x]\nargv = ['claude', 3]", "x", "argv must be a list of strings"),
    ("[launchers.x]\nargv = ['']", "x", "start with a program"),
    ('[launchers.x]\nargv = ["claude", "a\\u0000b"]', "x", "NUL"),
    ("[launchers.x]\nargv = ['mytool']", "x", "harness is required"),
    ("[launchers.x]\nargv = ['claude']\nharness = 'Claude Code'", "x", "harness must be a lowercase name"),
    ("[launchers.x]\nargv = ['claude']\nharness = 3", "x", "harness must be"),
    ("[launchers.x]\nargv = ['claude']\nenv = 'A=1'", "x", "env must be a table"),
    ("[launchers.x]\nargv = ['claude']\nenv = { A = 1 }", "x", "A must be a string"),
    ("[launchers.x]\nargv = ['claude']\nenv = { 'A-B' = '1' }", "x", "not a valid environment variable name"),
    ("[launchers.x]\nargv = ['claude']\nresume = ['claude', '--resume']", "x", "{session_id}"),
    ("[launchers.x]\nargv = ['claude']\nresume = ['{session_id}']", "x", "{session_id}"),
    ("[launchers.x]\nargv = ['claude']\nresume = 'claude -r'", "x", "resume must be a list"),
    ("[launchers.x]\nargv = ['claude']\nexit_command = ''", "x", "exit_command"),
    ('[launchers.x]\nargv = ["claude"]\nexit_command = "/exit\\n"', "x", "exit_command"),
    ("[launchers.x]\nargv = ['claude']\nexit_command = 3", "x", "exit_command"),
    ("[launchers.x]\nargv = ['claude']\ninject_tool_approval = 'no'", "x", "inject_tool_approval"),
    ("[launchers.x]\nargv = ['claude']\nargs = ['-v']", "x", "unknown key 'args'"),
    ("[launchers.x]\ncommand = 'claude'\nargv = ['claude']", "x", "cannot have 'argv'"),
    ("[launchers.x]\ncommand = 'claude'\nresume = []", "x", "cannot have 'resume'"),
    ("[launchers.x]\ncommand = ''", "x", "command must be a non-empty string"),
    ("[launchers.x]\ncommand = ['claude']", "x", "command must be a string"),
    ("[launchers.x]\ncommand = 'claude'\nharness = 1", "x", "harness must be a string"),
]


@pytest.mark.parametrize(("text", "name", "problem"), BAD_TOML)
def test_malformed_launchers_toml_is_refused_naming_launcher_and_problem(
    text: str, name: str | None, problem: str
) -> None:
    err = launcher_error(parse_launchers_toml, text)
    assert err.launcher == name
    assert problem in str(err)
    assert str(err).startswith(f"launcher {name!r}: " if name else "launchers.toml: ")


def test_toml_syntax_error_has_its_own_reason() -> None:
    assert launcher_error(parse_launchers_toml, "[x").reason == "toml"


# ------------------------------------------------------------------------------------------ properties

# User arguments: any strings without NUL (a NUL cannot be in argv), including flags, "--" and prompts.
user_arg = st.one_of(
    st.sampled_from(
        ["--", "-p", "--model", "opus", "mcp", "list", "resume", "--verbose", "fix the bug", "-"]
    ),
    st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20),
)
harness = st.sampled_from(["claude", "codex"])
port = st.integers(min_value=1, max_value=65535)
token_env = st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True)
token = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", min_size=20, max_size=43
)


def is_subsequence(small: tuple[str, ...], big: tuple[str, ...]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


@settings(max_examples=200, deadline=None)
@given(harness, st.lists(user_arg, max_size=8), port, token_env, st.booleans(), st.booleans())
def test_injection_keeps_the_users_arguments_in_order(
    h: str, args: list[str], p: int, env: str, approve: bool, preset: bool
) -> None:
    """Injection never drops or reorders the user's arguments: the program stays first and the rest
    follows the injection as one contiguous, unchanged block (a trailing prompt or -- stays last)."""
    launcher = Launcher("u", h, argv=(h, *args), inject_tool_approval=approve)
    plan = inject(
        launcher, endpoint_url=f"http://127.0.0.1:{p}/mcp", token_env=env, session_id=SID if preset else None
    )
    assert plan.argv[0] == h
    assert plan.argv[len(plan.argv) - len(args) :] == tuple(args)
    assert is_subsequence(launcher.argv, plan.argv)


@settings(max_examples=200, deadline=None)
@given(
    harness,
    st.lists(user_arg, max_size=6),
    port,
    token_env,
    token,
    st.dictionaries(token_env, user_arg, max_size=3),
)
def test_no_token_in_argv_or_env_add(
    h: str, args: list[str], p: int, env: str, secret: str, extra: dict[str, str]
) -> None:
    """The token never travels in the plan: no argv element and no env_add value holds it, whatever the
    token is (the plan is built without it; only the variable's name is in it)."""
    assume(not any(secret in a for a in args) and not any(secret in v for v in extra.values()))
    assume(env not in extra)
    plan = inject(
        Launcher("u", h, argv=(h, *args)),
        endpoint_url=f"http://127.0.0.1:{p}/mcp",
        token_env=env,
        session_id=SID,
        extra_env=extra,
    )
    assert not any(secret in a for a in plan.argv)
    assert not any(secret in v for v in plan.env_add.values())
    assert plan.token_env == env and env not in plan.env_add


@settings(max_examples=200, deadline=None)
@given(st.lists(user_arg, max_size=6), port, token_env, st.booleans())
def test_claude_mcp_config_parses_back(args: list[str], p: int, env: str, approve: bool) -> None:
    """Claude's --mcp-config value is valid JSON naming the endpoint and the token variable, in the
    single-value --flag=value form, so the variadic option cannot swallow a user argument."""
    url = f"http://127.0.0.1:{p}/mcp"
    plan = inject(
        Launcher("u", "claude", argv=("claude", *args), inject_tool_approval=approve),
        endpoint_url=url,
        token_env=env,
    )
    injected = plan.argv[1 : len(plan.argv) - len(args)]
    assert all(a.startswith("--") and "=" in a for a in injected)
    configs = [a.removeprefix("--mcp-config=") for a in injected if a.startswith("--mcp-config=")]
    assert len(configs) == 1
    server = json.loads(configs[0])["mcpServers"]["connect"]
    assert server == {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{{env}}}"}}
    assert ("--allowedTools=mcp__connect" in injected) is approve


@settings(max_examples=200, deadline=None)
@given(st.lists(user_arg, max_size=6), port, token_env, st.booleans())
def test_codex_overrides_parse_back_as_toml(args: list[str], p: int, env: str, approve: bool) -> None:
    """Every Codex -c value is a valid TOML key = value, and together they give mcp_servers.connect."""
    url = f"http://127.0.0.1:{p}/mcp"
    plan = inject(
        Launcher("u", "codex", argv=("codex", *args), inject_tool_approval=approve),
        endpoint_url=url,
        token_env=env,
    )
    injected = plan.argv[1 : len(plan.argv) - len(args)]
    assert injected[0::2] == ("-c",) * (len(injected) // 2)
    merged = tomllib.loads("\n".join(injected[1::2]))
    expected = {"url": url, "bearer_token_env_var": env}
    if approve:
        expected["default_tools_approval_mode"] = "approve"
    assert merged == {"mcp_servers": {"connect": expected}}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_toml_string_round_trips(value: str) -> None:
    """toml_string gives a TOML basic string that tomllib reads back as exactly the same text."""
    assert tomllib.loads(f"k = {toml_string(value)}") == {"k": value}


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["claude", "codex"]),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,40}", fullmatch=True),
    port,
)
def test_resume_plan_fills_the_template_and_injects(h: str, sid: str, p: int) -> None:
    """A resume plan is the launcher's resume template with the session id filled in, the injection
    after the program, and the session bound from the start."""
    plan = resume_plan(BUILTIN_LAUNCHERS[h], sid, endpoint_url=f"http://127.0.0.1:{p}/mcp")
    template = BUILTIN_LAUNCHERS[h].resume_argv
    assert plan.argv[0] == template[0] and plan.argv[-2:] == (template[1], sid)
    assert plan.session_id == sid and plan.connectable
    assert not any(re.search(r"\{session_id\}", a) for a in plan.argv)


@pytest.mark.parametrize(
    ("launcher", "presettable"),
    [
        (Launcher("c", "claude", argv=("claude", "--model", "opus")), True),
        (Launcher("c", "claude", argv=("claude", "--resume", "abc")), False),  # the argv picks a session
        (Launcher("c", "claude", argv=("claude", "--session-id=abc")), False),
        (Launcher("c", "claude", opaque="cd ~/src && claude"), False),  # opaque: argv unknown
        (Launcher("x", "codex", argv=("codex",)), False),  # the harness takes no preset id
        (Launcher("o", "opencode", argv=("opencode",)), False),
    ],
)
def test_an_off_launch_presets_a_session_id_only_where_the_harness_takes_one_and_argv_picks_none(
    launcher: Launcher, presettable: bool
) -> None:
    """An Off launch (no session asked for) gets a preset session id exactly when the harness presets
    one, the launcher is not opaque and its argv picks no session; the preset goes right after the
    program and is recorded as the plan's session (issue 24: moved from connectd/agents/launch.py)."""
    from connectcore.launchers import off_session_presettable, plain_plan, with_preset_session

    assert off_session_presettable(launcher) is presettable
    if presettable:
        plan = with_preset_session(plain_plan(launcher), SID)
        assert plan.argv == ("claude", f"--session-id={SID}", "--model", "opus") and plan.session_id == SID


def test_the_connect_offer_is_decided_in_the_core_in_order() -> None:
    """Claim: the page's Connect toggle is offered live for a connected agent or a hand-started one
    bound to its session, by restart for an agent connect launched whose launcher can restart and
    whose session is bound; refused, each with its reason, for a shell, an unknown program, a
    hand-started agent not yet bound, a launcher gone or unable to restart, or no bound session
    (issue 24: was decided in the page's script)."""
    from dataclasses import replace as copy

    from connectcore.launchers import ConnectOffer, builtin_launchers, connect_offer

    claude = builtin_launchers()["claude"]
    base: dict[str, Any] = dict(connected=False, harness="claude", launcher_name="claude", launcher=claude, session_bound=True)

    def offer(**over: Any) -> ConnectOffer:
        return connect_offer(**{**base, **over})

    assert offer() == ConnectOffer(True, "restart")
    assert offer(connected=True, harness="shell", launcher=None) == ConnectOffer(True, "live")
    assert offer(launcher_name=None, launcher=None) == ConnectOffer(True, "live")
    refused = {
        "shell": offer(harness="shell"),
        "unknown": offer(harness="unknown"),
        "none": offer(harness=None),
        "hand-started, unbound": offer(launcher_name=None, launcher=None, session_bound=False),
        "launcher gone": offer(launcher=None),
        "no exit command": offer(launcher=copy(claude, exit_command=None)),
        "unbound": offer(session_bound=False),
    }
    assert all(not o.enabled and o.reason and not o.mode for o in refused.values())
    assert "A shell" in refused["shell"].reason and "cannot tell" in refused["unknown"].reason
    assert refused["launcher gone"].reason == "Its launcher “claude” is no longer configured."
    assert refused["no exit command"].reason == copy(claude, exit_command=None).restart_refusal
    assert "unambiguously" in refused["unbound"].reason and "next launch" in refused["hand-started, unbound"].reason


def test_which_plan_a_launch_runs_is_the_core_s() -> None:
    """Claim (issue 24: was decided in connectd/launches.py): a connected launch injects (resuming the
    session given, else the fresh id), and one whose launcher cannot be connected is refused
    ``unconnectable``, never run Off; an Off launch is plain, or resumes the session given."""
    from connectcore.launchers import LauncherError, builtin_launchers, launch_plan

    claude = builtin_launchers()["claude"]
    url = "http://127.0.0.1:7000/mcp"
    sid = "0b4e9c2a-1f3d-4c5e-8a7b-9c0d1e2f3a4b"
    fresh = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"
    connected = launch_plan(claude, connect=True, session=None, endpoint_url=url, fresh_session_id=fresh)
    assert connected.token_env is not None and connected.session_id == fresh
    resumed = launch_plan(claude, connect=True, session=sid, endpoint_url=url, fresh_session_id=fresh)
    assert resumed.token_env is not None and resumed.session_id == sid and sid in resumed.argv
    off = launch_plan(claude, connect=False, session=None, endpoint_url=url, fresh_session_id=fresh)
    assert off.token_env is None and off.argv == claude.argv
    off_resumed = launch_plan(claude, connect=False, session=sid, endpoint_url=url, fresh_session_id=fresh)
    assert off_resumed.token_env is None and off_resumed.session_id == sid and sid in off_resumed.argv
    plain = Launcher("plain", "bash", argv=("bash",))
    assert not plain.connectable
    with pytest.raises(LauncherError) as refused:
        launch_plan(plain, connect=True, session=None, endpoint_url=url, fresh_session_id=fresh)
    assert refused.value.reason == "unconnectable" and str(refused.value).startswith("plain cannot be connected: ")
    assert launch_plan(plain, connect=False, session=None, endpoint_url=url, fresh_session_id=fresh).argv == ("bash",)


def test_a_launch_is_connected_when_its_preset_gives_a_scope_or_it_launches_control() -> None:
    """Claim (issue 24: was ``bool(scopes or control)`` in connectd/agents/launch.py, ``bool(scopes)``
    in launch_here.py): a control launch is connected even with the Off preset."""
    from connectcore.launchers import connects

    assert connects(scopes_given=True, control=False)
    assert connects(scopes_given=False, control=True)
    assert connects(scopes_given=True, control=True)
    assert not connects(scopes_given=False, control=False)


def test_only_a_process_inside_the_pane_may_ask_for_a_here_plan() -> None:
    """Claim (issue 24: was decided in connectd/agents/launch_here.py): a ``--here`` caller is refused
    unless the pane lives and the caller's ancestry reaches the pane's process."""
    from connectcore.launchers import HereRefusal, here_caller_refusal

    assert here_caller_refusal("%4", 300, pane_root=100, ancestry=[300, 200, 100, 1]) is None
    assert here_caller_refusal("%4", 100, pane_root=100, ancestry=[100, 1]) is None  # the pane's own process
    assert here_caller_refusal("%4", 300, pane_root=None, ancestry=[300, 100]) == HereRefusal(
        "unknown_target", "no live pane %4"
    )
    outside = HereRefusal("not_in_pane", "process 300 does not run inside %4")
    assert here_caller_refusal("%4", 300, pane_root=100, ancestry=[300, 200, 1]) == outside  # another pane's
    assert here_caller_refusal("%4", 300, pane_root=100, ancestry=[]) == outside  # gone


def test_a_here_supervisor_may_report_only_its_own_child() -> None:
    """Claim (issue 24: was decided in connectd/agents/launch_here.py)."""
    from connectcore.launchers import HereRefusal, here_child_refusal

    assert here_child_refusal(301, parent=300, supervisor=300) is None
    refused = HereRefusal("not_in_pane", "process 301 is not the supervisor's child")
    assert here_child_refusal(301, parent=200, supervisor=300) == refused  # a grandchild, or a stranger
    assert here_child_refusal(301, parent=None, supervisor=300) == refused  # gone


@pytest.mark.parametrize(
    ("parent", "child_start", "exited", "holds"),
    [
        (300, 5000, False, True),  # the supervisor's child, the same process life
        (None, None, False, False),  # no process with the child's pid
        (1, 5000, False, False),  # reparented: the supervisor died, or a stranger
        (300, 6000, False, False),  # the pid was reused (another start time)
        (300, 5000, True, False),  # exited, not yet reaped (a zombie)
    ],
)
def test_a_here_child_holds_its_pane_while_it_is_the_same_live_child(
    parent: int | None, child_start: int | None, exited: bool, holds: bool
) -> None:
    """Claim (issue 24: was decided in ``HerePanes.effective``, connectd/agents/launch_here.py): a
    ``--here`` pane's incarnation is its agent child's only while that child is still the
    supervisor's, with the start time it was reported with, and has not exited."""
    from connectcore.launchers import here_child_holds

    assert here_child_holds(301, supervisor=300, start=5000, parent=parent, child_start=child_start, exited=exited) is holds
