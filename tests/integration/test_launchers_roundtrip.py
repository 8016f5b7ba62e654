"""The injected launch configuration read back by the real harnesses' own parsers.

Needs the pinned programs under ``<repo>/.cache/harnesses/*/node_modules/.bin/`` (installed by
``tests/support/harnesses.py``); each test skips, saying so, when its program is missing.

- Claude Code: ``claude mcp list`` lists only configured servers and ignores ``--mcp-config``, so the
  round trip runs the plan itself in print mode against a recording loopback server: the ``connect``
  server is loaded from the injected JSON, Claude expands ``${CONNECT_TOKEN}`` from the environment
  into the bearer header it sends to ``/mcp``, the user's trailing prompt reaches the model intact
  (the variadic options did not swallow it), and the preset ``--session-id`` names the transcript.
  The resume plan then reopens that session with the injection.
- Codex: ``codex <plan's -c overrides> mcp list --json`` / ``mcp get connect --json`` parse the
  overrides with Codex's own config loader; a bogus approval mode is refused, proving that key is read.

Everything runs with a private temporary HOME (and CODEX_HOME) and talks only to 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from connectcore.launchers import Launcher, LaunchPlan, inject, resume_plan

REPO = Path(__file__).resolve().parents[2]
HARNESSES = REPO / ".cache" / "harnesses"
TOKEN = "ctok_ROUNDTRIP_7b1f0c9e2d4a4b6f8e3c5a7d9b1e0f2a"
SESSION = "6f1d2c3b-4a5e-4f60-8b7c-9d0e1f2a3b4c"
FIRST_PROMPT = "first words from the user: hello connect"
SECOND_PROMPT = "second words after the restart"


def harness_binary(name: str) -> Path:
    found = sorted(HARNESSES.glob(f"*/node_modules/.bin/{name}"))
    if not found:
        pytest.skip(
            f"{name} is not installed under {HARNESSES}/*/node_modules/.bin/ (see tests/support/harnesses.py)"
        )
    return found[-1]


@dataclass
class Recorder:
    """A loopback HTTP server that records every request: /mcp gets 401, /v1/messages a 400 error."""

    port: int = 0
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of(self, prefix: str) -> list[tuple[str, str, dict[str, str], bytes]]:
        with self.lock:
            return [r for r in self.requests if r[1].startswith(prefix)]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with rec.lock:
                rec.requests.append((self.command, self.path, dict(self.headers.items()), body))
            if self.path.startswith("/v1/messages"):
                payload = json.dumps(
                    {"type": "error", "error": {"type": "invalid_request_error", "message": "scripted"}}
                ).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
            else:
                payload = b""
                self.send_response(401)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()


def run_plan(
    plan: LaunchPlan, base_env: dict[str, str], cwd: Path, extra_args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run a plan the way the daemon does: argv as given, env_add on top, the token only in its variable."""
    assert plan.connectable and plan.token_env is not None
    assert not any(TOKEN in arg for arg in plan.argv), "the token must never be in argv"
    env = {**base_env, **plan.env_add, plan.token_env: TOKEN}
    return subprocess.run(
        [*plan.argv, *extra_args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def claude_env(home: Path, port: int) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": "sk-connect-test-0000000000000000000000000000",
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def init_event(stdout: str) -> dict[str, object]:
    for line in stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("type") == "system" and event.get("subtype") == "init":
                return dict(event)
    raise AssertionError(f"no init event in Claude's output:\n{stdout[:2000]}")


def test_claude_loads_injected_server_with_env_token_then_resumes(recorder: Recorder, tmp_path: Path) -> None:
    claude = str(harness_binary("claude"))
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    url = f"http://127.0.0.1:{recorder.port}/mcp"
    print_args = ("--print", "--output-format", "stream-json", "--verbose")
    launcher = Launcher(
        "claude-roundtrip",
        "claude",
        argv=(claude, *print_args, FIRST_PROMPT),
        resume_argv=(claude, "--resume", "{session_id}", *print_args, SECOND_PROMPT),
        exit_command="/exit",
    )

    plan = inject(launcher, endpoint_url=url, session_id=SESSION)
    assert plan.argv[-1] == FIRST_PROMPT and plan.session_id == SESSION
    done = run_plan(plan, claude_env(home, recorder.port), project)

    # Claude loaded the injected server ("dynamic": from --mcp-config, not from any config file) ...
    servers = init_event(done.stdout)["mcp_servers"]
    assert isinstance(servers, list)
    assert any(s.get("name") == "connect" and s.get("source") == "dynamic" for s in servers), servers
    # ... and called it with the token expanded from the environment into the bearer header.
    mcp_calls = recorder.of("/mcp")
    assert mcp_calls, f"Claude never called {url}; stderr: {done.stderr[-2000:]}"
    assert {headers.get("Authorization") for _m, _p, headers, _b in mcp_calls} == {f"Bearer {TOKEN}"}
    # The user's trailing prompt reached the model intact.
    bodies = [body.decode() for _m, _p, _h, body in recorder.of("/v1/messages")]
    assert bodies and FIRST_PROMPT in bodies[0]
    # The preset session id named the session.
    assert init_event(done.stdout)["session_id"] == SESSION
    assert list(home.glob(f".claude/projects/*/{SESSION}.jsonl")), "no transcript for the preset session id"

    # Restart-to-connect's relaunch: the resume plan reopens the same conversation, connected.
    before = len(recorder.of("/mcp"))
    resumed = run_plan(
        resume_plan(launcher, SESSION, endpoint_url=url), claude_env(home, recorder.port), project
    )
    resumed_servers = init_event(resumed.stdout)["mcp_servers"]
    assert isinstance(resumed_servers, list) and any(s.get("name") == "connect" for s in resumed_servers)
    later = recorder.of("/mcp")[before:]
    assert later and {h.get("Authorization") for _m, _p, h, _b in later} == {f"Bearer {TOKEN}"}
    last = recorder.of("/v1/messages")[-1][3].decode()
    assert FIRST_PROMPT in last and SECOND_PROMPT in last, (
        "the resumed request does not carry the earlier turn"
    )


def test_claude_prompt_right_after_the_injection_is_not_swallowed(recorder: Recorder, tmp_path: Path) -> None:
    """--mcp-config is variadic in Claude's CLI: in the space form it would take the next argument too.
    With tool approval off and no preset id, the user's prompt follows --mcp-config=<json> directly."""
    claude = str(harness_binary("claude"))
    home = tmp_path / "home"
    home.mkdir()
    launcher = Launcher(
        "claude-bare",
        "claude",
        argv=(claude, FIRST_PROMPT, "--print", "--output-format", "stream-json", "--verbose"),
        inject_tool_approval=False,
    )
    plan = inject(launcher, endpoint_url=f"http://127.0.0.1:{recorder.port}/mcp", session_id=None)
    assert plan.argv[1].startswith("--mcp-config=") and plan.argv[2] == FIRST_PROMPT
    done = run_plan(plan, claude_env(home, recorder.port), tmp_path)
    servers = init_event(done.stdout)["mcp_servers"]
    assert isinstance(servers, list) and any(s.get("name") == "connect" for s in servers), servers
    bodies = [body.decode() for _m, _p, _h, body in recorder.of("/v1/messages")]
    assert bodies and FIRST_PROMPT in bodies[0]


def codex_env(home: Path) -> dict[str, str]:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": "C.UTF-8",
    }


def test_codex_parses_the_injected_overrides(tmp_path: Path) -> None:
    codex = str(harness_binary("codex"))
    url = "http://127.0.0.1:7878/mcp"
    env = codex_env(tmp_path / "home")
    # The user's own arguments (a subcommand) follow the injection, which Codex reads as global -c.
    plan = inject(
        Launcher("codex-roundtrip", "codex", argv=(codex, "mcp", "list", "--json")), endpoint_url=url
    )
    listed = run_plan(plan, env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    servers = {s["name"]: s for s in json.loads(listed.stdout)}
    assert servers["connect"]["enabled"] is True
    assert servers["connect"]["transport"]["type"] == "streamable_http"
    assert servers["connect"]["transport"]["url"] == url
    assert servers["connect"]["transport"]["bearer_token_env_var"] == "CONNECT_TOKEN"
    assert servers["connect"]["auth_status"] == "bearer_token"

    got = run_plan(
        inject(Launcher("g", "codex", argv=(codex, "mcp", "get", "connect", "--json")), endpoint_url=url),
        env,
        tmp_path,
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["transport"]["bearer_token_env_var"] == "CONNECT_TOKEN"

    # Negative control: Codex does read the approval key (a bogus value is refused), so "approve" parsed.
    bogus = LaunchPlan(
        launcher="bogus",
        argv=tuple(a.replace('"approve"', '"bogus"') for a in plan.argv),
        env_add=plan.env_add,
        connectable=True,
        token_env=plan.token_env,
    )
    refused = run_plan(bogus, env, tmp_path)
    assert refused.returncode != 0 and "default_tools_approval_mode" in refused.stderr
