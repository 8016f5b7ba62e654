"""Launchers: how an agent is started, resumed and quit, and the per-launch MCP injection.

Rules first, as data; then the values; then pure functions. Nothing here touches a file, the user's
global harness configuration or the environment: :func:`inject` and :func:`resume_plan` return what
to run and what to add, and the daemon runs it.

A structured launcher is argv plus environment, so the daemon can add flags to it safely. A user's
opaque shell string (``command = "..."`` in ``launchers.toml``) is kept runnable but is never
connectable, at launch or by restart, because the daemon does not parse shell.

The token never travels on a command line. The plan names the environment variable the harness reads
it from (``token_env``); the daemon puts the value there through a 0700 exec script, never in argv,
never in a ``tmux new-session -e`` or ``env K=V cmd`` string (a tmux server keeps its starting
client's argv for life).

Where the injection goes: right after the program (``argv[0]``), so the user's own arguments keep
their order and a trailing prompt or ``--`` stays last. Claude Code's ``--mcp-config`` and
``--allowedTools`` are variadic (they would swallow a following positional argument, such as a
prompt or a subcommand), so they are given in the ``--flag=value`` form, which takes exactly one
value. Codex's ``-c`` is global, so it works before ``resume`` too.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from connectcore import opencode_binding as OC
from connectcore._machine import ConnectError

# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------

SESSION_PLACEHOLDER = "{session_id}"
DEFAULT_TOKEN_ENV = "CONNECT_TOKEN"
MCP_SERVER_NAME = "connect"

#: ``http://127.0.0.1:PORT/mcp`` with an explicit port: the MCP endpoint refuses any other Host.
ENDPOINT_RE = re.compile(r"http://127\.0\.0\.1:([1-9][0-9]{0,4})/mcp")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LAUNCHER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
HARNESS_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

OPAQUE_REASON = (
    "an opaque shell-string launcher cannot be connected: connectd does not parse shell, so it cannot "
    "add the endpoint safely; rewrite it as argv + env to connect it"
)


@dataclass(frozen=True)
class HarnessRule:
    """What connectd knows about one harness's launch, resume and injection."""

    exit_command: str | None
    resume_argv: tuple[str, ...]
    connectable: bool
    reason: str = ""  # why not connectable
    presets_session_id: bool = False  # accepts a preset session id for a new session
    #: arguments in the user's argv that already pick a session (then none is preset)
    session_flags: frozenset[str] = frozenset()
    #: a new session's id is learnt through the process's own server after it started, on a loopback
    #: port connectd picks per launch (OpenCode: :mod:`connectcore.opencode_binding`)
    binds_by_server: bool = False


HARNESS_RULES: Mapping[str, HarnessRule] = {
    "claude": HarnessRule(
        exit_command="/exit",
        resume_argv=("claude", "--resume", SESSION_PLACEHOLDER),
        connectable=True,
        presets_session_id=True,
        session_flags=frozenset(
            {
                "--session-id",
                "--resume",
                "-r",
                "--continue",
                "-c",
                "--fork-session",
                "--from-pr",
                "--teleport",
            }
        ),
    ),
    "codex": HarnessRule(
        exit_command="/quit",
        resume_argv=("codex", "resume", SESSION_PLACEHOLDER),
        connectable=True,
    ),
    "opencode": HarnessRule(
        exit_command="/exit",
        resume_argv=("opencode", "--session", SESSION_PLACEHOLDER),
        connectable=True,
        binds_by_server=True,
    ),
}

#: Keys a launcher table in ``launchers.toml`` may hold.
STRUCTURED_KEYS = frozenset({"harness", "argv", "env", "exit_command", "resume", "inject_tool_approval"})
OPAQUE_KEYS = frozenset({"harness", "command", "env"})
TOP_LEVEL_KEYS = frozenset({"launchers"})


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class LauncherError(ConnectError):
    """A malformed launcher, a bad injection request or a launch that cannot be connected.

    ``launcher`` names the launcher (``None`` for a file-level problem); ``reason`` is a short code:
    ``toml``, ``invalid``, ``bad_endpoint``, ``bad_env``, ``bad_session_id``, ``not_restartable``,
    ``unconnectable``, ``bad_port``, ``server_flag``.
    """

    def __init__(self, launcher: str | None, problem: str, *, reason: str = "invalid") -> None:
        super().__init__(f"launcher {launcher!r}: {problem}" if launcher is not None else problem)
        self.launcher = launcher
        self.problem = problem
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launcher:
    """A way to start an agent: structured (``argv`` + ``env``) or opaque (a shell string)."""

    name: str
    harness: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    exit_command: str | None = None
    resume_argv: tuple[str, ...] = ()
    inject_tool_approval: bool = True
    opaque: str | None = None

    def __post_init__(self) -> None:
        _check_launcher(self)

    @property
    def connectable(self) -> bool:
        return not self.unconnectable_reason

    @property
    def unconnectable_reason(self) -> str:
        """Empty when a launch can be connected; otherwise why not, in words for the person."""
        if self.opaque is not None:
            return OPAQUE_REASON
        rule = HARNESS_RULES.get(self.harness)
        if rule is None:
            return f"connect is unavailable for {self.harness}: no per-launch MCP override is known for it"
        return rule.reason

    @property
    def restartable(self) -> bool:
        return not self.restart_refusal

    @property
    def restart_refusal(self) -> str:
        """Empty when restart-to-connect can relaunch this launcher's agent; otherwise why not."""
        if not self.connectable:
            return self.unconnectable_reason
        if not self.resume_argv:
            return f"{self.name} has no resume command, so it can only be connected at launch"
        if not self.exit_command:
            return f"{self.name} has no exit command, so connectd cannot ask the agent to quit"
        return ""


@dataclass(frozen=True)
class ConnectOffer:
    """Whether the person's Connect toggle can connect a pane, and how: ``live`` (a connected agent,
    or a running one bound to its session: the toggle changes the grant at once) or ``restart`` (a
    running agent connect launched Off: connected only by relaunching it); else why not."""

    enabled: bool
    mode: str = ""  # "live" | "restart" when enabled
    reason: str = ""  # why not, when not enabled


def connect_offer(
    *, connected: bool, harness: str | None, launcher_name: str | None, launcher: Launcher | None, session_bound: bool
) -> ConnectOffer:
    """The toggle's offer for one pane (the page shows it; was decided in the page's script).
    ``launcher_name``: the launcher connect started the pane with (None: not started by connect);
    ``launcher``: that launcher as configured now (None: no longer configured)."""
    if connected:
        return ConnectOffer(True, "live")
    if harness == "shell":
        return ConnectOffer(False, reason="A shell, not an agent: there is nothing to connect.")
    if not harness or harness == "unknown":
        return ConnectOffer(False, reason="connectd cannot tell which agent runs here, so it cannot offer Connect.")
    if launcher_name is None:
        if session_bound:
            return ConnectOffer(True, "live")
        return ConnectOffer(
            False,
            reason="Not started by connectd, and no agent session is bound to it yet: connect it at its next "
            "launch (connectd launch … --connect observe).",
        )
    if launcher is None:
        return ConnectOffer(False, reason=f"Its launcher “{launcher_name}” is no longer configured.")
    if launcher.restart_refusal:
        return ConnectOffer(False, reason=launcher.restart_refusal)
    if not session_bound:
        return ConnectOffer(
            False,
            reason="No agent session is bound to this pane unambiguously, so a relaunch could not resume it: "
            "connect it at launch.",
        )
    return ConnectOffer(True, "restart")


@dataclass(frozen=True)
class LaunchPlan:
    """What the daemon runs: ``argv`` under its environment plus ``env_add``.

    ``env_add`` holds the launcher's declared environment, the ``--env`` overrides and the injection's
    non-secret values; never the token. When ``token_env`` is set, the daemon must put the agent's
    token in that variable (through its exec script), and nowhere else. ``session_id`` is the session
    the launch is bound to from the start (Claude's preset id, or the resumed session), else ``None``.
    """

    launcher: str
    argv: tuple[str, ...]
    env_add: Mapping[str, str] = field(hash=False)
    connectable: bool
    reason: str = ""
    token_env: str | None = None
    session_id: str | None = None
    #: the loopback port the agent's own server listens on (OpenCode), for its session binding
    server_port: int | None = None
    #: when set, the daemon must put the launch's server password in this variable (through its exec
    #: script, as the token), and keep it in memory only for the binding
    password_env: str | None = None


@dataclass(frozen=True)
class Injection:
    """What one harness needs added to be connected: arguments after the program, and environment."""

    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, hash=False)


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


def _has_control(text: str, *, allow_newline: bool = False) -> bool:
    return any((ord(ch) < 0x20 and not (allow_newline and ch == "\n")) or ord(ch) == 0x7F for ch in text)


def _check_launcher(launcher: Launcher) -> None:
    name = launcher.name
    if not isinstance(name, str) or not LAUNCHER_NAME_RE.fullmatch(name):
        raise LauncherError(
            str(name), "name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    if not isinstance(launcher.harness, str) or not HARNESS_NAME_RE.fullmatch(launcher.harness):
        raise LauncherError(
            name, f"harness must be a lowercase name such as claude or codex, got {launcher.harness!r}"
        )
    _check_env(name, launcher.env)
    if launcher.opaque is not None:
        if not isinstance(launcher.opaque, str) or not launcher.opaque.strip():
            raise LauncherError(name, "command must be a non-empty string")
        if "\x00" in launcher.opaque:
            raise LauncherError(name, "command contains a NUL character")
        if launcher.argv or launcher.resume_argv:
            raise LauncherError(name, "an opaque command launcher cannot also have argv or resume")
        return
    _check_argv(name, "argv", launcher.argv)
    if launcher.resume_argv:
        _check_argv(name, "resume", launcher.resume_argv)
        if not any(SESSION_PLACEHOLDER in arg for arg in launcher.resume_argv[1:]):
            raise LauncherError(
                name, f"resume must contain {SESSION_PLACEHOLDER} in an argument after the program"
            )
    if launcher.exit_command is not None and (
        not isinstance(launcher.exit_command, str)
        or not launcher.exit_command.strip()
        or _has_control(launcher.exit_command)
    ):
        raise LauncherError(name, "exit_command must be one line of printable text, such as /exit")
    if not isinstance(launcher.inject_tool_approval, bool):
        raise LauncherError(name, "inject_tool_approval must be true or false")


def _check_argv(name: str, what: str, argv: Sequence[str]) -> None:
    if not isinstance(argv, tuple) or not argv:
        raise LauncherError(name, f"{what} must be a non-empty list of strings")
    for arg in argv:
        if not isinstance(arg, str):
            raise LauncherError(name, f"{what} must hold only strings, got {arg!r}")
        if "\x00" in arg:
            raise LauncherError(name, f"{what} argument {arg!r} contains a NUL character")
    if not argv[0].strip():
        raise LauncherError(name, f"{what} must start with a program name")


def _check_env(name: str, env: Mapping[str, str], *, what: str = "env") -> None:
    if not isinstance(env, Mapping):
        raise LauncherError(name, f'{what} must be a table of NAME = "value"', reason="bad_env")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
            raise LauncherError(
                name, f"{what}: {key!r} is not a valid environment variable name", reason="bad_env"
            )
        if not isinstance(value, str):
            raise LauncherError(name, f"{what}: {key} must be a string, got {value!r}", reason="bad_env")
        if "\x00" in value:
            raise LauncherError(name, f"{what}: {key} contains a NUL character", reason="bad_env")


# --------------------------------------------------------------------------------------------------
# Built-in launchers
# --------------------------------------------------------------------------------------------------


def _builtin(name: str) -> Launcher:
    rule = HARNESS_RULES[name]
    return Launcher(
        name=name, harness=name, argv=(name,), exit_command=rule.exit_command, resume_argv=rule.resume_argv
    )


BUILTIN_LAUNCHERS: Mapping[str, Launcher] = {name: _builtin(name) for name in ("claude", "codex", "opencode")}


def builtin_launchers() -> dict[str, Launcher]:
    """The built-in structured launchers for claude, codex and opencode."""
    return dict(BUILTIN_LAUNCHERS)


# --------------------------------------------------------------------------------------------------
# launchers.toml
# --------------------------------------------------------------------------------------------------


def parse_launchers_toml(text: str) -> dict[str, Launcher]:
    """The built-in launchers plus (overridden by) the user's, from the text of ``launchers.toml``.

    Format::

        [launchers.claude-work]
        harness = "claude"                      # default: the program's name when it is a known harness
        argv = ["claude", "--model", "opus"]
        env = { CLAUDE_CONFIG_DIR = "/home/me/.claude-work" }
        exit_command = "/exit"                  # default: the harness's
        resume = ["claude", "--resume", "{session_id}"]   # default: the harness's form; [] for none
        inject_tool_approval = true             # pre-approve connect's own tools in the harness

        [launchers.old]
        command = "cd ~/src && claude"          # opaque: runnable, never connectable

    Refuses malformed input with :class:`LauncherError` naming the launcher and the problem.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LauncherError(None, f"launchers.toml: not valid TOML: {exc}", reason="toml") from None
    unknown = sorted(set(data) - TOP_LEVEL_KEYS)
    if unknown:
        raise LauncherError(
            None,
            f"launchers.toml: unknown top-level key {unknown[0]!r}; launchers go in [launchers.<name>] tables",
        )
    table = data.get("launchers", {})
    if not isinstance(table, dict):
        raise LauncherError(None, "launchers.toml: launchers must be a table of [launchers.<name>] tables")
    launchers = builtin_launchers()
    for name, spec in table.items():
        launchers[name] = _launcher_from_toml(name, spec)
    return launchers


def _launcher_from_toml(name: str, spec: Any) -> Launcher:
    if not LAUNCHER_NAME_RE.fullmatch(name):
        raise LauncherError(
            name, "name must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    if not isinstance(spec, dict):
        raise LauncherError(name, "must be a table with argv (or command)")
    env = spec.get("env", {})
    if not isinstance(env, dict):
        raise LauncherError(name, 'env must be a table of NAME = "value"', reason="bad_env")
    if "command" in spec:
        extra = sorted(set(spec) - OPAQUE_KEYS)
        if extra:
            raise LauncherError(
                name, f"an opaque command launcher cannot have {extra[0]!r} (use argv instead)"
            )
        command = spec["command"]
        if not isinstance(command, str):
            raise LauncherError(name, "command must be a string")
        harness = spec.get("harness", "unknown")
        if not isinstance(harness, str):
            raise LauncherError(name, "harness must be a string")
        return Launcher(name=name, harness=harness, env=dict(env), opaque=command)
    extra = sorted(set(spec) - STRUCTURED_KEYS)
    if extra:
        raise LauncherError(name, f"unknown key {extra[0]!r} (expected {', '.join(sorted(STRUCTURED_KEYS))})")
    if "argv" not in spec:
        raise LauncherError(name, "needs argv (a list of strings) or command (an opaque shell string)")
    argv = _string_list(name, "argv", spec["argv"])
    _check_argv(name, "argv", argv)
    harness = spec.get("harness")
    if harness is None:
        program = argv[0].rsplit("/", 1)[-1] if argv else ""
        if program not in HARNESS_RULES:
            raise LauncherError(
                name,
                f"harness is required when the program ({program!r}) is not one of {', '.join(HARNESS_RULES)}",
            )
        harness = program
    if not isinstance(harness, str):
        raise LauncherError(name, "harness must be a string")
    rule = HARNESS_RULES.get(harness)
    if "resume" in spec:
        resume = _string_list(name, "resume", spec["resume"])
    else:
        # The harness's resume form, run by the same program the launcher runs (its own path).
        resume = (argv[0], *rule.resume_argv[1:]) if rule else ()
    exit_command = spec.get("exit_command", rule.exit_command if rule else None)
    return Launcher(
        name=name,
        harness=harness,
        argv=argv,
        env=dict(env),
        exit_command=exit_command,
        resume_argv=resume,
        inject_tool_approval=spec.get("inject_tool_approval", True),
    )


def _string_list(name: str, what: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise LauncherError(name, f"{what} must be a list of strings")
    return tuple(value)


# --------------------------------------------------------------------------------------------------
# Injection
# --------------------------------------------------------------------------------------------------


def check_endpoint(url: str) -> str:
    """``url`` if it is ``http://127.0.0.1:PORT/mcp`` with an explicit port, else :class:`LauncherError`."""
    match = ENDPOINT_RE.fullmatch(url) if isinstance(url, str) else None
    if match is None or not 1 <= int(match.group(1)) <= 65535:
        raise LauncherError(
            None,
            f"the endpoint must be http://127.0.0.1:PORT/mcp with an explicit port, got {url!r}",
            reason="bad_endpoint",
        )
    return url


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quoted and escaped), as Codex's ``-c key=value`` parses it."""
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def claude_mcp_config(endpoint_url: str, token_env: str = DEFAULT_TOKEN_ENV) -> str:
    """The ``--mcp-config`` JSON for Claude Code; the header names the variable, not the token."""
    config = {
        "mcpServers": {
            MCP_SERVER_NAME: {
                "type": "http",
                "url": check_endpoint(endpoint_url),
                "headers": {"Authorization": f"Bearer ${{{_token_env(token_env)}}}"},
            }
        }
    }
    return json.dumps(config, separators=(",", ":"))


def opencode_config_content(endpoint_url: str, token_env: str = DEFAULT_TOKEN_ENV) -> str:
    """The ``OPENCODE_CONFIG_CONTENT`` JSON for OpenCode (merged with the user's own config)."""
    config = {
        "mcp": {
            MCP_SERVER_NAME: {
                "type": "remote",
                "url": check_endpoint(endpoint_url),
                "headers": {"Authorization": f"Bearer {{env:{_token_env(token_env)}}}"},
            }
        }
    }
    return json.dumps(config, separators=(",", ":"))


def _token_env(token_env: str) -> str:
    if not isinstance(token_env, str) or not ENV_NAME_RE.fullmatch(token_env):
        raise LauncherError(
            None, f"token_env {token_env!r} is not a valid environment variable name", reason="bad_env"
        )
    return token_env


def harness_injection(
    harness: str,
    *,
    endpoint_url: str,
    token_env: str = DEFAULT_TOKEN_ENV,
    inject_tool_approval: bool = True,
    server_port: int | None = None,
) -> Injection:
    """The per-launch override one harness needs, whether or not its launches are connectable.

    Claude Code: ``--mcp-config=<json>`` and ``--allowedTools=mcp__connect``. Codex: ``-c`` overrides of
    ``mcp_servers.connect`` (url, bearer_token_env_var, default_tools_approval_mode). OpenCode:
    ``OPENCODE_CONFIG_CONTENT`` (merged with the person's config; the token by ``{env:VAR}``) and, when
    ``server_port`` is given, ``--port=P --hostname=127.0.0.1 --mdns=false``: the process's own server,
    which its session binding talks to (:mod:`connectcore.opencode_binding`; the daemon puts the
    server's password in ``OPENCODE_SERVER_PASSWORD`` as it puts the token, never in argv). Approval
    of connect's own tools (and only those) is added unless ``inject_tool_approval`` is false.
    """
    check_endpoint(endpoint_url)
    _token_env(token_env)
    if harness == "claude":
        argv = [f"--mcp-config={claude_mcp_config(endpoint_url, token_env)}"]
        if inject_tool_approval:
            argv.append(f"--allowedTools=mcp__{MCP_SERVER_NAME}")
        return Injection(argv=tuple(argv))
    if harness == "codex":
        prefix = f"mcp_servers.{MCP_SERVER_NAME}"
        argv = [
            "-c",
            f"{prefix}.url={toml_string(endpoint_url)}",
            "-c",
            f"{prefix}.bearer_token_env_var={toml_string(token_env)}",
        ]
        if inject_tool_approval:
            argv += ["-c", f"{prefix}.default_tools_approval_mode={toml_string('approve')}"]
        return Injection(argv=tuple(argv))
    if harness == "opencode":
        server: tuple[str, ...] = ()
        if server_port is not None:
            try:
                server = OC.server_args(server_port)
            except ValueError as exc:
                raise LauncherError(None, str(exc), reason="bad_port") from None
        return Injection(
            argv=server, env={"OPENCODE_CONFIG_CONTENT": opencode_config_content(endpoint_url, token_env)}
        )
    raise LauncherError(None, f"no per-launch MCP override is known for harness {harness!r}")


def _merged_env(launcher: Launcher, extra_env: Mapping[str, str]) -> dict[str, str]:
    _check_env(launcher.name, extra_env, what="--env")
    env = dict(launcher.env)
    env.update(extra_env)
    return env


def plain_plan(
    launcher: Launcher, *, extra_env: Mapping[str, str] | None = None, server_port: int | None = None
) -> LaunchPlan:
    """The launch without connect (``--connect off``, or a launcher that cannot be connected).

    ``server_port``: where the harness binds by its own server (:func:`server_port_wanted`), an Off
    launch serves too, so its session is bound from the start and restart-to-connect can resume it
    later (as Claude Code's Off launch gets a preset session id)."""
    env = _merged_env(launcher, extra_env or {})
    argv = ("/bin/sh", "-c", launcher.opaque) if launcher.opaque is not None else launcher.argv
    reason = launcher.unconnectable_reason or "launched with connect off"
    port = _checked_server_port(launcher, server_port)
    if port is not None:
        if OC.PASSWORD_ENV in env:
            raise LauncherError(
                launcher.name, f"{OC.PASSWORD_ENV} is set by connectd for the session binding; the launcher's "
                "env must not set it", reason="bad_env",
            )
        argv = (argv[0], *OC.server_args(port), *argv[1:])
    return LaunchPlan(
        launcher=launcher.name, argv=argv, env_add=env, connectable=False, reason=reason, server_port=port,
        password_env=OC.PASSWORD_ENV if port is not None else None,
    )


def server_port_wanted(launcher: Launcher, *, session: str | None = None) -> bool:
    """Whether a launch of ``launcher`` (resuming ``session``, if given) needs a server port from the
    daemon: its harness binds by its own server, and the launch starts a new session (its argv picks
    none and sets no server option itself). A resume, or an argv naming its session, is bound from
    the launch instead; an argv that picks a session without naming it stays unbound."""
    rule = HARNESS_RULES.get(launcher.harness)
    if launcher.opaque is not None or rule is None or not rule.binds_by_server or session is not None:
        return False
    return OC.plan(launcher.argv).step is OC.Step.CREATE_AND_SELECT and OC.server_flag_in(launcher.argv) is None


def _checked_server_port(launcher: Launcher, server_port: int | None, *, session: str | None = None) -> int | None:
    """``server_port`` when the launch wants one (:func:`server_port_wanted`); refuses a missing or a
    malformed port, and a port for a launch that does not serve."""
    wanted = server_port_wanted(launcher, session=session)
    if server_port is None:
        return None
    if not wanted:
        raise LauncherError(
            launcher.name, f"a server port is only for a new {launcher.harness} session bound by its own server",
            reason="bad_port",
        )
    try:
        return OC.check_port(server_port)
    except ValueError as exc:
        raise LauncherError(launcher.name, str(exc), reason="bad_port") from None


def check_opencode_argv(name: str, argv: Sequence[str]) -> None:
    """Refuse an OpenCode argv that sets what a connected launch must set itself: its server's
    address (``--port``, ``--hostname``, mDNS) or ``--mini`` (which refuses ``--port``)."""
    flag = OC.server_flag_in(argv)
    if flag is not None:
        raise LauncherError(
            name,
            f"{flag} cannot be in a connected OpenCode launcher's argv: connectd sets OpenCode's server "
            "address itself (its session binding talks to it); remove it or launch with connect off",
            reason="server_flag",
        )


def _preset_argv(argv: Sequence[str], session_id: str) -> tuple[str, ...]:
    """``argv`` with the harness's preset session id flag (Claude Code's ``--session-id``) after the program."""
    return (argv[0], f"--session-id={session_id}", *argv[1:])


def off_session_presettable(launcher: Launcher) -> bool:
    """Whether a launch with connect off (and no session asked for) gets a preset session id: where the
    harness takes one (Claude Code's ``--session-id``), the launcher is not opaque, and the user's argv
    picks none. The pane is then bound to its session from the start, so restart-to-connect can resume
    it later; without it nothing names the session."""
    rule = HARNESS_RULES.get(launcher.harness)
    if launcher.opaque is not None or rule is None or not rule.presets_session_id:
        return False
    return not _session_picked(rule, launcher.argv)


def with_preset_session(plan: LaunchPlan, session_id: str) -> LaunchPlan:
    """``plan`` with ``session_id`` preset in its argv and recorded as its session (an Off launch's,
    when :func:`off_session_presettable`)."""
    return replace(plan, argv=_preset_argv(plan.argv, session_id), session_id=session_id)


def _session_picked(rule: HarnessRule, argv: Sequence[str]) -> bool:
    for arg in argv[1:]:
        if arg == "--":
            return False
        if arg in rule.session_flags or arg.split("=", 1)[0] in rule.session_flags:
            return True
    return False


def _connected_plan(
    launcher: Launcher,
    argv: tuple[str, ...],
    *,
    endpoint_url: str,
    token_env: str,
    session_id: str | None,
    extra_env: Mapping[str, str],
    server_port: int | None = None,
) -> LaunchPlan:
    if launcher.harness == "opencode":
        check_opencode_argv(launcher.name, argv)
    injection = harness_injection(
        launcher.harness,
        endpoint_url=endpoint_url,
        token_env=token_env,
        inject_tool_approval=launcher.inject_tool_approval,
        server_port=server_port,
    )
    env = _merged_env(launcher, extra_env)
    if token_env in env:
        raise LauncherError(
            launcher.name,
            f"{token_env} is connectd's token variable; the launcher's env and --env must not set it",
            reason="bad_env",
        )
    reserved = set(injection.env) | ({OC.PASSWORD_ENV} if launcher.harness == "opencode" else set())
    clash = sorted(set(env) & reserved)
    if clash:
        raise LauncherError(
            launcher.name,
            f"{clash[0]} is set by the connect injection; the launcher's env must not set it",
            reason="bad_env",
        )
    env.update(injection.env)
    serves = launcher.harness == "opencode" and server_port is not None
    return LaunchPlan(
        launcher=launcher.name,
        argv=(argv[0], *injection.argv, *argv[1:]),
        env_add=env,
        connectable=True,
        token_env=token_env,
        session_id=session_id,
        server_port=server_port if serves else None,
        password_env=OC.PASSWORD_ENV if serves else None,
    )


def connects(*, scopes_given: bool, control: bool) -> bool:
    """Whether a launch is connected (gets a token and the injection): its preset gives a scope, or it
    launches control (whose act scope is no preset, so a control launch with the Off preset is
    connected too)."""
    return scopes_given or control


def check_connectable(launcher: Launcher) -> None:
    """A connected launch of ``launcher`` is refused ``unconnectable`` (naming the reason) when the
    launcher cannot be connected (opaque, an unknown harness): the person asked for a connected agent,
    so it is never quietly launched Off."""
    if not launcher.connectable:
        raise LauncherError(
            None, f"{launcher.name} cannot be connected: {launcher.unconnectable_reason}", reason="unconnectable"
        )


def inject(
    launcher: Launcher,
    *,
    endpoint_url: str,
    token_env: str = DEFAULT_TOKEN_ENV,
    session_id: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    server_port: int | None = None,
) -> LaunchPlan:
    """A connected launch of ``launcher``: its argv with the injection after the program.

    ``session_id`` is the id to preset for a new session where the harness accepts one (Claude Code's
    ``--session-id``, a UUID); it is not used where the harness picks its own, or where the user's
    argv already picks a session. The returned plan's ``session_id`` says whether it was preset (or,
    for OpenCode, that the argv names its session). ``server_port`` is the loopback port the daemon
    picked for a harness bound by its own server (:func:`server_port_wanted`: required then, refused
    otherwise). A launcher that cannot be connected (opaque, an unknown harness) is refused
    (:func:`check_connectable`), never given its plain launch in place of a connected one.
    """
    check_connectable(launcher)
    rule = HARNESS_RULES[launcher.harness]
    argv = launcher.argv
    preset: str | None = None
    if rule.binds_by_server:
        if launcher.harness == "opencode":
            check_opencode_argv(launcher.name, argv)
        port = _checked_server_port(launcher, server_port)
        if port is None and server_port_wanted(launcher):
            raise LauncherError(
                launcher.name,
                f"a connected {launcher.harness} launch needs the loopback port connectd picked for its server",
                reason="bad_port",
            )
        return _connected_plan(
            launcher, argv, endpoint_url=endpoint_url, token_env=token_env,
            session_id=OC.plan(argv).session_id, extra_env=extra_env or {}, server_port=port,
        )
    if session_id is not None and rule.presets_session_id and not _session_picked(rule, argv):
        if not isinstance(session_id, str) or not UUID_RE.fullmatch(session_id):
            raise LauncherError(
                launcher.name,
                f"a preset {launcher.harness} session id must be a UUID, got {session_id!r}",
                reason="bad_session_id",
            )
        preset = session_id.lower()
        argv = _preset_argv(argv, preset)
    return _connected_plan(
        launcher,
        argv,
        endpoint_url=endpoint_url,
        token_env=token_env,
        session_id=preset,
        extra_env=extra_env or {},
    )


def launch_plan(
    launcher: Launcher,
    *,
    connect: bool,
    session: str | None,
    endpoint_url: str,
    fresh_session_id: str,
    extra_env: Mapping[str, str] | None = None,
    server_port: int | None = None,
) -> LaunchPlan:
    """Which plan a launch runs. Connected: the endpoint injected, resuming ``session`` if given, else
    a new session (``fresh_session_id``, where the harness takes one); refused ``unconnectable`` for a
    launcher that cannot be connected (never a quiet Off launch). Off: plain, or resuming ``session``
    (its argv from the resume template, no injection)."""
    if connect:
        check_connectable(launcher)
        if session is not None:
            return resume_plan(launcher, session, endpoint_url=endpoint_url, extra_env=extra_env)
        return inject(
            launcher, endpoint_url=endpoint_url, session_id=fresh_session_id, extra_env=extra_env, server_port=server_port
        )
    if session is None:
        return plain_plan(launcher, extra_env=extra_env, server_port=server_port)
    return replace(plain_plan(launcher, extra_env=extra_env), argv=resume_argv(launcher, session), session_id=session)


def resume_argv(launcher: Launcher, session_id: str) -> tuple[str, ...]:
    """The launcher's resume template with ``session_id`` filled in (no injection)."""
    if not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id):
        raise LauncherError(launcher.name, f"malformed session id {session_id!r}", reason="bad_session_id")
    if launcher.harness == "opencode" and not OC.SESSION_ID_RE.fullmatch(session_id):
        raise LauncherError(
            launcher.name, f"an OpenCode session id looks like ses_..., got {session_id!r}", reason="bad_session_id"
        )
    if not launcher.resume_argv:
        raise LauncherError(launcher.name, f"{launcher.name} has no resume command", reason="not_restartable")
    return tuple(arg.replace(SESSION_PLACEHOLDER, session_id) for arg in launcher.resume_argv)


def resume_plan(
    launcher: Launcher,
    session_id: str,
    *,
    endpoint_url: str,
    token_env: str = DEFAULT_TOKEN_ENV,
    extra_env: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """The connected relaunch onto session ``session_id`` (restart-to-connect, restore).

    Refuses with :class:`LauncherError` (``not_restartable``) a launcher that cannot be restarted to
    connect (opaque, unconnectable harness, no resume or exit command), naming the reason.
    """
    if not launcher.restartable:
        raise LauncherError(launcher.name, launcher.restart_refusal, reason="not_restartable")
    argv = resume_argv(launcher, session_id)
    return _connected_plan(
        launcher,
        argv,
        endpoint_url=endpoint_url,
        token_env=token_env,
        session_id=session_id,
        extra_env=extra_env or {},
    )


@dataclass(frozen=True)
class HereRefusal:
    """Why a ``connectd launch --here`` call is refused (``reason`` is the refusal code)."""

    reason: str
    problem: str


def here_caller_refusal(pane_id: str, pid: int, *, pane_root: int | None, ancestry: Sequence[int]) -> HereRefusal | None:
    """Who may ask for a ``--here`` plan, report its child or ask for the next plan: only a process
    running inside ``pane_id``. ``pane_root``: the pane's process (None: no live pane); ``ancestry``:
    ``pid`` and its ancestors (empty when ``pid`` is gone). None: it may."""
    if pane_root is None:
        return HereRefusal("unknown_target", f"no live pane {pane_id}")
    if pane_root not in ancestry:
        return HereRefusal("not_in_pane", f"process {pid} does not run inside {pane_id}")
    return None


def here_child_refusal(child: int, *, parent: int | None, supervisor: int) -> HereRefusal | None:
    """Whose start a ``--here`` supervisor may report: only its own child (``parent``: the child's
    parent pid, None when the child is gone). None: it may."""
    if parent is None or parent != supervisor:
        return HereRefusal("not_in_pane", f"process {child} is not the supervisor's child")
    return None


def here_child_holds(
    child: int, *, supervisor: int, start: int, parent: int | None, child_start: int | None, exited: bool
) -> bool:
    """Whether a ``--here`` supervisor's agent child still holds its pane (the pane's incarnation is
    then the child's process life): a process with the child's pid is still the supervisor's child
    (:func:`here_child_refusal`), with the start time recorded when the supervisor reported it (else the
    pid was reused), and has not exited (a zombie). ``parent`` and ``child_start`` None: no process
    with that pid. False: the pane is the supervisor's again (the agent's exit ends its incarnation)."""
    still_child = here_child_refusal(child, parent=parent, supervisor=supervisor) is None
    return still_child and child_start == start and not exited
