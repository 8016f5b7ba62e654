"""Real harness programs for tests and captures: pinned versions, install, private homes, a tmux rig.

Everything here keeps a person's own setup out of reach: every program runs with a private temporary
``HOME`` (and ``CODEX_HOME``), points at the scripted model server on 127.0.0.1, and lives in a
private tmux server (``tmux -L <unique> -f /dev/null``) that is killed at the end.

Pinned versions live in :data:`PINNED` and nowhere else. Installs go to
``<repo>/.cache/harnesses/<name>-<version>/`` (gitignored) and are skipped when already present.
Another release is run by naming it in the environment (``CONNECT_CLAUDE_VERSION=2.1.300``,
``CONNECT_CODEX_VERSION=0.160.0``): that is how ``make compat`` (scripts/compat.py) runs the live
acceptance and the screen capture on each release of its matrix; unset, everything runs the pin.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "harnesses"

# The one place harness versions are pinned (checked with `npm view <package> version`).
PINNED: dict[str, tuple[str, str]] = {
    "claude": ("@anthropic-ai/claude-code", "2.1.332"),
    "codex": ("@openai/codex", "0.171.0"),
}

# Harnesses whose screens are captured (scripts/capture_screens.py) and that have a live test of their
# own, outside tests/integration/test_live.py: OpenCode (`npm view opencode-ai versions`;
# tests/integration/test_live_opencode.py; `make compat OPENCODE=...` runs that test per release).
CAPTURE_ONLY: dict[str, tuple[str, str]] = {
    "opencode": ("opencode-ai", "1.18.33"),
}
PACKAGES = {**PINNED, **CAPTURE_ONLY}

DUMMY_KEY = "sk-connect-test-0000000000000000000000000000"


def version_variable(name: str) -> str:
    """The environment variable that selects another release of ``name`` (``CONNECT_CLAUDE_VERSION``)."""
    return f"CONNECT_{name.upper()}_VERSION"


def pinned(name: str) -> str:
    return PACKAGES[name][1]


def version(name: str) -> str:
    """The release under test: the one named by :func:`version_variable` if set, else the pin."""
    return os.environ.get(version_variable(name)) or PACKAGES[name][1]


def is_pinned(name: str) -> bool:
    return version(name) == pinned(name)


def install_dir(name: str, release: str | None = None) -> Path:
    return CACHE / f"{name}-{release or version(name)}"


def binary(name: str, release: str | None = None) -> Path:
    """Path of the installed program (``claude`` or ``codex``); see :func:`install`."""
    return install_dir(name, release) / "node_modules" / ".bin" / name


def install(name: str, release: str | None = None) -> Path:
    """Install the release under test (or ``release``) with npm unless present; return the binary path."""
    if name not in PACKAGES:
        raise ValueError(f"unknown harness {name!r}: expected one of {', '.join(PACKAGES)}")
    release = release or version(name)
    path = binary(name, release)
    if path.exists():
        return path
    package = PACKAGES[name][0]
    target = install_dir(name, release)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    subprocess.run(["npm", "install", "--prefix", str(partial), "--no-audit", "--no-fund",
                    "--no-save", f"{package}@{release}"], check=True, capture_output=True, text=True,
                   timeout=600)
    partial.rename(target)
    if not path.exists():
        raise RuntimeError(f"npm installed {package}@{release} but {path} is missing")
    return path


# --------------------------------------------------------------------------------------------------
# Private homes
# --------------------------------------------------------------------------------------------------


def base_env(home: Path) -> dict[str, str]:
    """A minimal environment: no variable of the person running the tests leaks in."""
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "tmux-256color",
        "SHELL": "/bin/bash",
        "USER": os.environ.get("USER", "root"),
        "TMPDIR": str(home / "tmp"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }


def claude_home(home: Path, cwd: Path, base_url: str, *, api_key: str = DUMMY_KEY,
                approve_key: bool = True, trust: bool = True,
                allow: Sequence[str] = ()) -> dict[str, str]:
    """Prepare ``home`` for Claude Code and return its environment.

    ``approve_key=False`` leaves the "use this API key?" dialog in; ``trust=False`` leaves the
    folder-trust dialog in; ``allow`` adds ``permissions.allow`` rules to the user settings.
    """
    home.mkdir(parents=True, exist_ok=True)
    (home / "tmp").mkdir(exist_ok=True)
    (home / ".claude").mkdir(exist_ok=True)
    state: dict[str, object] = {
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": version("claude"),
        "numStartups": 1,
        "theme": "dark",
        "autoUpdates": False,
        "projects": {str(cwd): {"hasTrustDialogAccepted": trust, "allowedTools": [],
                                "hasCompletedProjectOnboarding": True}},
    }
    if approve_key:
        state["customApiKeyResponses"] = {"approved": [api_key[-20:]], "rejected": []}
    (home / ".claude.json").write_text(json.dumps(state, indent=2))
    settings: dict[str, object] = {"autoUpdates": False}
    if allow:
        settings["permissions"] = {"allow": list(allow)}
    (home / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))
    env = base_env(home)
    env.update({
        "ANTHROPIC_API_KEY": api_key,
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    })
    return env


CODEX_NOTICES_SEEN = (
    # What Codex writes once its first-run notices were answered; without it the first screen is a
    # model-upgrade dialog ("Meet GPT-6 Sol").
    "[notice.model_migrations]\n"
    '"gpt-5.5" = "gpt-6-sol"\n'
    "\n[tui]\n"
    "screen_reader_detection_done = true\n"
    "\n[tui.model_availability_nux]\n"
    '"gpt-6.1-sol" = 1\n'
)


def codex_home(home: Path, cwd: Path, base_url: str, *, api_key: str = DUMMY_KEY, trust: bool = True,
               retries: int = 0, model: str = "gpt-5.5", notices_seen: bool = True,
               approval_policy: str | None = None, extra_toml: str = "") -> dict[str, str]:
    """Prepare ``home/.codex`` for Codex with a model provider pointing at ``base_url`` and return
    its environment.

    ``retries`` sets the provider's request and stream retries (a stream retry shows
    "Reconnecting... n/N"); ``notices_seen=False`` leaves the model-upgrade dialog in; ``trust=False``
    leaves the folder-trust dialog in (Codex asks only inside a git repository); ``approval_policy``
    (``"on-request"``, ``"never"``) is written when given; ``extra_toml`` is appended as is.
    """
    codex = home / ".codex"
    codex.mkdir(parents=True, exist_ok=True)
    (home / "tmp").mkdir(exist_ok=True)
    top = [f'model = "{model}"', 'model_provider = "scripted"', "check_for_update_on_startup = false"]
    if approval_policy:
        top.append(f'approval_policy = "{approval_policy}"')
    parts = ["\n".join(top) + "\n",
             "[model_providers.scripted]\n"
             'name = "scripted"\n'
             f'base_url = "{base_url}/v1"\n'
             'wire_api = "responses"\n'
             'env_key = "SCRIPTED_API_KEY"\n'
             f"request_max_retries = {retries}\n"
             f"stream_max_retries = {retries}\n"]
    if trust:
        parts.append(f'[projects.{json.dumps(str(cwd))}]\ntrust_level = "trusted"\n')
    if notices_seen:
        parts.append(CODEX_NOTICES_SEEN)
    if extra_toml:
        parts.append(extra_toml)
    (codex / "config.toml").write_text("\n".join(parts))
    env = base_env(home)
    env.update({"CODEX_HOME": str(codex), "SCRIPTED_API_KEY": api_key})
    return env


def opencode_home(home: Path, cwd: Path, base_url: str, *, api_key: str = DUMMY_KEY,
                  ask_bash: bool = True) -> dict[str, str]:
    """Prepare ``home`` for OpenCode and return its environment: a config file named by
    ``OPENCODE_CONFIG`` whose built-in ``anthropic`` provider points at ``base_url`` (the scripted
    model server's Anthropic Messages API), autoupdate, sharing, LSP downloads and default plugins
    off; ``ask_bash`` makes the bash tool ask (the permission dialog)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "tmp").mkdir(exist_ok=True)
    config: dict[str, object] = {
        "$schema": "https://opencode.ai/config.json",
        "model": "anthropic/claude-sonnet-4-5",
        "autoupdate": False,
        "share": "disabled",
        "provider": {"anthropic": {"options": {"baseURL": base_url + "/v1", "apiKey": api_key}}},
    }
    if ask_bash:
        config["permission"] = {"bash": "ask"}
    path = home / "opencode.json"
    path.write_text(json.dumps(config, indent=2))
    env = base_env(home)
    env.update({
        "OPENCODE_CONFIG": str(path),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    })
    return env


# Codex started without any ``-c`` override spawns a shared background app-server from CODEX_HOME
# that outlives the pane; with one override it runs in-process. Always launch with this.
CODEX_IN_PROCESS = ("-c", "check_for_update_on_startup=false")


def reap(home: Path) -> list[int]:
    """Kill (by pid) every process whose command line names ``home``: leftovers of a run, such as a
    Codex background app-server started from ``home/.codex``. Returns the pids signalled."""
    marker = str(home).encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            try:
                os.kill(int(entry.name), 15)
                killed.append(int(entry.name))
            except OSError:
                pass
    return killed


# --------------------------------------------------------------------------------------------------
# A private tmux server
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Capture:
    text: str
    cursor: tuple[int, int]  # (x, y) within the visible screen
    command: str  # #{pane_current_command}
    width: int
    height: int


class Tmux:
    """A private tmux server (``-L tc-<uuid> -f /dev/null``); :meth:`kill` at the end."""

    def __init__(self, prefix: str = "tc") -> None:
        self.socket = f"{prefix}-{uuid.uuid4().hex[:10]}"

    def run(self, *args: str, check: bool = True, input: str | None = None) -> str:
        # no COLUMNS/LINES of the runner (pytest-xdist sets 80x24): the server's panes inherit its environment
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        proc = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args], capture_output=True,
                              text=True, input=input, timeout=30, env=env)
        if check and proc.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def launch(self, name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path, *,
               width: int = 80, height: int = 24, history: int = 5000) -> str:
        """Start ``argv`` in a new session through a 0700 launcher script (so the environment never
        appears in a tmux client's argv). Returns the pane id (``%N``)."""
        script_dir = Path(env["HOME"]) / ".launch"
        script_dir.mkdir(parents=True, exist_ok=True)
        script = script_dir / f"{name}.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        script.write_text(f"#!/bin/sh\n{exports}cd {shlex.quote(str(cwd))}\nexec {shlex.join(argv)}\n")
        script.chmod(0o700)
        self.run("start-server", ";", "set-option", "-g", "history-limit", str(history), check=False)
        self.run("set-option", "-g", "history-limit", str(history), check=False)
        out = self.run("new-session", "-d", "-P", "-F", "#{pane_id}", "-s", name, "-x", str(width),
                       "-y", str(height), "-c", str(cwd), str(script))
        pane = out.strip()
        self.run("set-option", "-t", name, "remain-on-exit", "on")
        return pane

    def capture(self, pane: str, *, scrollback: int = 0, escapes: bool = False) -> Capture:
        """Text and cursor from ONE tmux invocation (capture-pane ; display-message), so both come
        from the same server loop turn and agree with each other."""
        args = ["capture-pane", "-p", "-t", pane]
        if escapes:
            args.append("-e")
        if scrollback:
            args += ["-S", f"-{scrollback}"]
        out = self.run(*args, ";", "display-message", "-p", "-t", pane,
                       "#{cursor_x} #{cursor_y} #{pane_width} #{pane_height} #{pane_current_command}")
        text, _, info = out.removesuffix("\n").rpartition("\n")
        x, y, w, h, command = info.split(" ", 4)
        return Capture(text + "\n", (int(x), int(y)), command, int(w), int(h))

    def type(self, pane: str, text: str) -> None:
        """Type literal text (no Enter)."""
        self.run("send-keys", "-t", pane, "-l", "--", text)

    def keys(self, pane: str, *keys: str) -> None:
        """Press named keys (``Enter``, ``Escape``, ``C-c``, ``M-Enter`` ...)."""
        self.run("send-keys", "-t", pane, *keys)

    def paste(self, pane: str, text: str) -> None:
        """Paste ``text`` as one bracketed paste."""
        name = f"b{uuid.uuid4().hex[:8]}"
        self.run("load-buffer", "-b", name, "-", input=text)
        self.run("paste-buffer", "-p", "-d", "-b", name, "-t", pane)

    def wait_for(self, pane: str, predicate: object, timeout: float = 20.0,
                 interval: float = 0.1) -> Capture:
        """Poll until ``predicate(capture)`` is true; raise TimeoutError with the last screen."""
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        while True:
            cap = self.capture(pane)
            if predicate(cap):
                return cap
            if time.monotonic() > deadline:
                raise TimeoutError(f"screen condition not met in {timeout}s; last screen:\n{cap.text}")
            time.sleep(interval)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", "kill-server"],
                       capture_output=True, timeout=30)
