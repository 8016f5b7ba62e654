"""The live-acceptance rig: real Claude Code and Codex agents on a real ``connectd serve``.

Everything runs offline and private:

- the pinned harness versions (:mod:`tests.support.harnesses`) under ``.cache/harnesses``, installed
  with npm when missing;
- one scripted model server on 127.0.0.1 (:mod:`tests.support.model_server`); each agent has its own
  dummy API key, so each agent's model is scripted on its own queue and its requests are told apart;
- a private tmux server (``tmux -L connect-live-... -f /dev/null``) whose own environment is a private
  one, so nothing of the person's shell (``ANTHROPIC_*``, ``CLAUDE_CONFIG_DIR``, ``HOME``) reaches a pane;
- a real ``connectd serve`` subprocess with a private data directory and HOME, and the owner CLI
  (``connectd launch ... --env K=V``) against it, so each launch is the real per-launch injection
  with the token in the agent's environment;
- every agent in its own temporary HOME (``CODEX_HOME`` too). A person's ``~/.claude`` and ``~/.codex``
  are never read or written.

:class:`Steps` gives each step of a run a deadline and records how long it took; :meth:`LiveFleet.close`
removes the tmux server, the daemon, stray processes started from the temporary homes and the homes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx2

from connectcore import releases
from connectd.tmux.procfs import alive
from tests.support import harnesses as H
from tests.support.model_server import ModelServer, Request, ToolCall, Turn
from tests.support.tmux_server import TmuxServer

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

#: The MCP tools connect serves (Claude Code names them ``mcp__connect__<tool>``).
CONNECT_TOOLS = ("whoami", "list_agents", "get_agent", "find_sessions", "get_session", "send_message",
                 "get_message", "list_messages")
CLAUDE_PREFIX = "mcp__connect__"
CODEX_NAMESPACE = "mcp__connect"


def tool_search_select(*tools: str) -> dict[str, Any]:
    """The ToolSearch input that loads deferred connect tools into Claude Code's next request."""
    return {"query": "select:" + ",".join(CLAUDE_PREFIX + t for t in tools), "max_results": len(tools)}


# --------------------------------------------------------------------------------------------------
# Steps with deadlines
# --------------------------------------------------------------------------------------------------


class StepTimeout(AssertionError):
    pass


@dataclass
class Steps:
    """Each step of the run has a deadline; :meth:`wait` never waits past the current one."""

    timings: list[tuple[str, float]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _name: str = ""
    _deadline: float = 0.0
    describe: Callable[[], str] | None = None  # extra context for a timeout (screens, daemon log)

    @contextlib.contextmanager
    def step(self, name: str, deadline: float) -> Iterator[None]:
        self._name, self._deadline = name, time.monotonic() + deadline
        begun = time.monotonic()
        try:
            yield
        finally:
            self.timings.append((name, time.monotonic() - begun))
            print(f"[live] {name}: {time.monotonic() - begun:.1f}s", flush=True)

    def wait(self, probe: Callable[[], T], what: str, *, timeout: float | None = None,
             every: float = 0.2) -> T:
        """Poll ``probe`` until it returns a truthy value (returned); fail at the step's deadline."""
        limit = self._deadline if timeout is None else min(self._deadline, time.monotonic() + timeout)
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() >= limit:
                extra = self.describe() if self.describe else ""
                raise StepTimeout(f"step {self._name!r}: timed out waiting for {what}\n{extra}")
            time.sleep(every)

    @property
    def total(self) -> float:
        return time.monotonic() - self.started


# --------------------------------------------------------------------------------------------------
# The fleet
# --------------------------------------------------------------------------------------------------


@dataclass
class Agent:
    name: str
    harness: str  # claude | codex | opencode
    key: str  # its dummy API key: the model server's queue and the way to tell its requests apart
    home: Path
    env: dict[str, str]
    pane: str = ""
    address: str = ""
    session: str | None = None  # the session id connectd bound at launch (Claude's preset id)
    actor: str | None = None
    launch: dict[str, Any] = field(default_factory=dict)

    @property
    def queue(self) -> str:
        """The model server's queue its requests arrive on: OpenCode speaks Anthropic Messages."""
        return "claude" if self.harness == "opencode" else self.harness


def _key(name: str) -> str:
    # distinct in its last 20 characters: Claude Code approves a custom key by them
    return f"sk-connect-live-{name}-" + f"{abs(hash(name)) % 10**12:012d}" + "0" * 20 + name


class LiveFleet:
    """The model server, a private tmux server and a real connectd; agents launched by its CLI.

    ``person=True`` gives the run one private *person home*, as on a real machine: the daemon and the
    tmux server both run in it (so a window the daemon opens without ``--env``, such as control's
    ``resume_session``, inherits it), it is set up for both harnesses against the model server under
    the person's own key (:attr:`person_key`), and the daemon serves the history index of its
    ``~/.claude`` and ``~/.codex``. Agents prepared with ``in_person_home=True`` run there too, so
    their sessions are the person's history. ``launchers`` adds launchers.toml entries (name to a
    table of fields, see :meth:`launchers_toml`).
    """

    def __init__(self, root: Path | None = None, *, width: int = 120, height: int = 40, person: bool = False,
                 launchers: dict[str, dict[str, Any]] | None = None, trust: tuple[str, ...] = ()) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="connect-live-"))
        self.work = self.root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "notes.txt").write_text("A scratch project for the live acceptance run.\n")
        self.data_dir = self.root / "connect-data"
        self.data_dir.mkdir(exist_ok=True)
        self.width, self.height = width, height
        self.model = ModelServer()
        self.tmux = TmuxServer("connect-live")
        self.daemon: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.agents: dict[str, Agent] = {}
        self._http: httpx2.Client | None = None
        self.person = self.root / "person-home" if person else None
        self.person_key = _key("person")
        self.extra_launchers = dict(launchers or {})
        self.trust = trust  # harnesses beyond the pins whose release under test connectd types into
        self._env = self._private_env(self.person or self.root / "daemon-home")

    # --- life ---------------------------------------------------------------------------------------

    @staticmethod
    def _private_env(home: Path) -> dict[str, str]:
        home.mkdir(parents=True, exist_ok=True)
        (home / "tmp").mkdir(exist_ok=True)
        env = H.base_env(home)
        if os.environ.get("TMUX_TMPDIR"):
            env["TMUX_TMPDIR"] = os.environ["TMUX_TMPDIR"]
        return env

    def start(self, timeout: float = 30.0, *, install: bool = True) -> LiveFleet:
        """``install=False``: do not install a missing pinned harness (npm) first."""
        for name in H.PINNED if install else ():
            H.install(name)
        self.model.start()
        if self.person is not None:
            self._env = self._person_env(self.person)
            self.tmux.env = dict(self._env)
        else:
            self.tmux.env = self._private_env(self.root / "tmux-home")
        self.tmux.new_session("main", width=self.width, height=self.height, cwd=str(self.work))
        (self.data_dir / "launchers.toml").write_text(self.launchers_toml(self.extra_launchers))
        env = dict(self._env)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
        info = self.data_dir / "daemon.json"
        log = open(self.root / "daemon.log", "ab")  # noqa: SIM115 - the child holds it
        history = [] if self.person is not None else ["--no-history"]
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "connectd.cli", "serve", "--data-dir", str(self.data_dir), "--port", "0",
             "--tmux-socket", self.tmux.socket_name, *history, *self.trust_args(self.trust)],
            stdout=log, stderr=log, env=env, cwd=str(self.work), start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"connectd exited with {self.daemon.returncode}:\n{self.daemon_log()}")
            if info.exists():
                self.port = json.loads(info.read_text())["port"]
                with contextlib.suppress(httpx2.TransportError):
                    if self.http().get("/api/agents").status_code == 200:
                        return self
            time.sleep(0.1)
        raise RuntimeError(f"connectd did not start:\n{self.daemon_log()}")

    def _person_env(self, home: Path) -> dict[str, str]:
        """The person's home, set up for both harnesses under the person's key; its environment."""
        env = H.claude_home(home, self.work, self.model.url, api_key=self.person_key)
        env.update(H.codex_home(home, self.work, self.model.url, api_key=self.person_key))
        if os.environ.get("TMUX_TMPDIR"):
            env["TMUX_TMPDIR"] = os.environ["TMUX_TMPDIR"]
        return env

    @staticmethod
    def trust_args(extra: tuple[str, ...] = ()) -> list[str]:
        """``--trust-release`` for each release under test that is not verified yet: connectd types no
        message into an unverified release, and ``make compat`` runs this acceptance to verify one.
        ``extra`` names harnesses beyond the pins (OpenCode)."""
        return [arg for name in (*H.PINNED, *extra) if not releases.is_verified(name, H.version(name))
                for arg in ("--trust-release", f"{name}@{H.version(name)}")]

    @staticmethod
    def launchers_toml(extra: dict[str, dict[str, Any]] | None = None) -> str:
        """The real launchers, pointing at the pinned binaries (they replace the built-ins' names),
        and ``extra`` ones: ``harness`` defaults to the name, ``argv`` to the harness's with ``argv_add``
        appended."""
        # one -c override keeps Codex in-process (no shared background app-server)
        argv = {"claude": [str(H.binary("claude"))], "codex": [str(H.binary("codex")), *H.CODEX_IN_PROCESS],
                "opencode": [str(H.binary("opencode"))]}
        tables = {name: {"harness": name, "argv": argv[name]} for name in ("claude", "codex", "opencode")}
        for name, fields in (extra or {}).items():
            fields = dict(fields)
            harness = fields.setdefault("harness", name)
            tables[name] = {"argv": argv[harness] + list(fields.pop("argv_add", ())), **fields}
        return "\n".join(
            f"[launchers.{name}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in fields.items())
            for name, fields in tables.items()
        )

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(15)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait(5)
        pane_pids = self._pane_pids()
        self.tmux.kill()
        self.model.stop()
        for agent in self.agents.values():
            H.reap(agent.home)
        H.reap(self.root)
        # An agent still exiting (Claude Code writes its ~/.claude.json on the way out) would recreate
        # files under the root after it is removed: wait for the panes' processes to be gone first.
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline and any(alive(pid) for pid in pane_pids):
            time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)

    def _pane_pids(self) -> list[int]:
        out = self.tmux.tmux("list-panes", "-a", "-F", "#{pane_pid}", check=False) if self.tmux.server_pid else ""
        return [int(pid) for pid in out.split() if pid.isdigit()]

    def __enter__(self) -> LiveFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def daemon_log(self, tail: int = 6000) -> str:
        path = self.root / "daemon.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    # --- the owner: CLI and API ---------------------------------------------------------------------

    def cli(self, *args: str, expect_ok: bool = True) -> Any:
        """``connectd <args> --data-dir D --json`` as the person runs it; the parsed JSON answer."""
        env = dict(self._env)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
        proc = subprocess.run([sys.executable, "-m", "connectd.cli", *args, "--data-dir", str(self.data_dir),
                               "--json"], capture_output=True, text=True, env=env, cwd=str(self.work),
                              timeout=60)
        if expect_ok and proc.returncode != 0:
            raise AssertionError(f"connectd {' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr}")
        if proc.returncode != 0:
            return {"error": proc.stderr.strip(), "returncode": proc.returncode}
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def owner_token(self) -> str:
        return (self.data_dir / "owner_token").read_text().strip()

    def http(self) -> httpx2.Client:
        if self._http is None:
            self._http = httpx2.Client(base_url=f"http://127.0.0.1:{self.port}",
                                       headers={"Authorization": f"Bearer {self.owner_token}"}, timeout=30)
        return self._http

    def api(self, method: str, path: str, body: dict[str, Any] | None = None, expect: int = 200) -> Any:
        response = self.http().request(method, path, json=body)
        assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    def view(self, agent: Agent) -> dict[str, Any] | None:
        return next((a for a in self.api("GET", "/api/agents") if a["pane"] == agent.pane), None)

    def cards(self) -> list[dict[str, Any]]:
        return list(self.api("GET", "/api/cards"))

    def audit(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self.api("GET", f"/api/audit?after={after}&order=oldest&limit=500")
            if not page:
                return rows
            rows += page
            after = max(int(r["id"]) for r in page)

    # --- agents -------------------------------------------------------------------------------------

    @property
    def person_home(self) -> Path:
        """The HOME connectd runs with. An agent the person starts by hand shares it, as a person's
        own agents share theirs: connectd reads Claude Code's session registry from
        ``<HOME>/.claude/sessions`` there."""
        return self.person or self.root / "daemon-home"

    def prepare(self, name: str, harness: str, *, extra_env: dict[str, str] | None = None,
                home: Path | None = None, in_person_home: bool = False) -> Agent:
        """A private HOME for one agent (or ``home``) and the environment it is launched with;
        ``in_person_home``: the agent runs in the person's home of ``LiveFleet(person=True)`` (only its
        own key is passed), its sessions the person's."""
        home = home or self.root / f"home-{name}"
        key = _key(name)
        if in_person_home:
            if self.person is None:
                raise ValueError("in_person_home needs LiveFleet(person=True)")
            if harness == "claude":  # Claude Code asks about a key it has not approved: approve this one
                state_file = self.person / ".claude.json"
                state = json.loads(state_file.read_text())
                state["customApiKeyResponses"]["approved"].append(key[-20:])
                state_file.write_text(json.dumps(state, indent=2))
            env = {"ANTHROPIC_API_KEY" if harness == "claude" else "SCRIPTED_API_KEY": key}
            home = self.person
        elif harness == "claude":
            env = H.claude_home(home, self.work, self.model.url, api_key=key)
        elif harness == "codex":
            env = H.codex_home(home, self.work, self.model.url, api_key=key)
        elif harness == "opencode":
            env = H.opencode_home(home, self.work, self.model.url, api_key=key, ask_bash=False)
        else:
            raise ValueError(f"no live harness {harness!r}")
        env.update(extra_env or {})
        agent = Agent(name, harness, key, home, env)
        self.agents[name] = agent
        return agent

    def launch(self, agent: Agent, connect: str, *, control: bool = False, launcher: str | None = None) -> Agent:
        """``connectd launch <launcher> --connect <preset> [--control] --cwd <work> --env K=V ...``
        (the launcher is the agent's harness unless named)."""
        args = ["launch", launcher or agent.harness, "--connect", connect, "--cwd", str(self.work)]
        if control:
            args.append("--control")
        for key, value in agent.env.items():
            args += ["--env", f"{key}={value}"]
        result = self.cli(*args)
        agent.launch = result
        agent.pane, agent.address = result["pane"], result["address"]
        agent.session = result["session"][1] if result.get("session") else None
        agent.actor = result.get("actor")
        return agent

    def start_by_hand(self, agent: Agent, *args: str) -> Agent:
        """The person opens a shell in a new window and types the harness's name (and ``args``) there:
        no ``connectd launch``, so connectd holds no launch record, token or session for it. The
        agent's environment comes from a file the shell sources first (as a person's profile holds
        it), with the release under test first on PATH under its own name."""
        env = {**agent.env, "PATH": f"{H.binary(agent.harness).parent}{os.pathsep}{agent.env['PATH']}"}
        profile = agent.home / f".profile-{agent.name}"
        profile.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
        profile.chmod(0o600)
        pane = self.tmux.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-c", str(self.work)).strip()
        agent.pane = pane
        for line in (f". {shlex.quote(str(profile))}", shlex.join([agent.harness, *args])):
            self.tmux.tmux("send-keys", "-t", pane, "-l", "--", line)
            self.tmux.tmux("send-keys", "-t", pane, "Enter")
        return agent

    def screen(self, agent: Agent) -> str:
        return self.tmux.tmux("capture-pane", "-p", "-t", agent.pane, check=False)

    def screens(self) -> str:
        return "\n".join(f"--- {a.name} ({a.pane}) ---\n{self.screen(a)}" for a in self.agents.values() if a.pane)

    def ready(self, agent: Agent) -> bool:
        view = self.view(agent)
        return bool(view and view["activity"] == "idle" and view["composer"] == "empty")

    def type_prompt(self, agent: Agent, text: str, *, presses: int = 3) -> None:
        """The person types a prompt into the agent's pane and presses Enter, as a person does: once the
        text shows in the composer, and again while it still sits there as a draft (a loaded machine can
        hand Codex the keys late, and Codex then takes an Enter that follows typing that fast as a new
        line, CI stop 17)."""
        self.tmux.tmux("send-keys", "-t", agent.pane, "-l", "--", text)
        _until(lambda: self._composer(agent) != "empty", 10)
        for _ in range(presses):
            time.sleep(0.4)
            self.tmux.tmux("send-keys", "-t", agent.pane, "Enter", check=False)
            if _until(lambda: self._composer(agent) != "draft", 5):
                return

    def _composer(self, agent: Agent) -> str | None:
        """connectd's reading of the agent's composer (None once the pane is gone)."""
        view = self.view(agent)
        return None if view is None else str(view["composer"])

    # --- the agents' models -------------------------------------------------------------------------

    def script(self, agent: Agent, turns: Iterable[Turn]) -> None:
        self.model.script(agent.queue, turns, api_key=agent.key)

    def requests(self, agent: Agent, *, scripted_only: bool = True) -> list[Request]:
        return [r for r in self.model.requests_for(agent.queue, scripted_only=scripted_only)
                if r.api_key == agent.key]


def _until(probe: Callable[[], bool], timeout: float, every: float = 0.1) -> bool:
    """Poll ``probe`` for up to ``timeout`` seconds; whether it came true."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


def home_snapshot(home: Path | None = None) -> dict[str, tuple[int, int]]:
    """(mtime_ns, size) of everything under a person's own Claude Code and Codex state
    (``~/.claude``, ``~/.claude.json``, ``~/.codex``), to show a run left it untouched."""
    home = home or Path.home()
    out: dict[str, tuple[int, int]] = {}
    for top in (home / ".claude", home / ".claude.json", home / ".codex"):
        paths = [top] if not top.is_dir() else [top, *top.rglob("*")]
        for path in paths:
            with contextlib.suppress(OSError):
                st = path.lstat()
                out[str(path)] = (st.st_mtime_ns, st.st_size)
    return out


def tool_results(request: Request) -> list[dict[str, Any]]:
    """The tool results a request carries back to the model, oldest first, as
    ``{"id", "error", "text"}`` (Anthropic ``tool_result`` blocks, Responses ``function_call_output``)."""
    body = request.body if isinstance(request.body, dict) else {}
    out: list[dict[str, Any]] = []
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "tool_result":
                inner = part.get("content")
                text = inner if isinstance(inner, str) else "".join(
                    c.get("text", "") for c in inner or () if isinstance(c, dict))
                out.append({"id": part.get("tool_use_id"), "error": bool(part.get("is_error")), "text": text})
    for item in body.get("input") or () if isinstance(body.get("input"), list) else ():
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            out.append({"id": item.get("call_id"), "error": False, "text": text})
    return out


def result_for(requests: Sequence[Request], call_id: str) -> dict[str, Any] | None:
    for request in requests:
        for result in tool_results(request):
            if result["id"] == call_id:
                return result
    return None


# --------------------------------------------------------------------------------------------------
# What the live tests share: connect's tool calls as a model makes them, their results as it saw them
# --------------------------------------------------------------------------------------------------


def call(name: str, args: dict[str, Any] | None = None, *, id: str) -> ToolCall:
    """A call of one of connect's tools, as either harness's model makes it."""
    return ToolCall(name, args or {}, namespace=CODEX_NAMESPACE, id=id)


def result(fleet: LiveFleet, agent: Agent, call_id: str) -> dict[str, Any] | None:
    return result_for(fleet.requests(agent), call_id)


def payload(found: dict[str, Any]) -> Any:
    """A successful connect tool result as the model saw it (Codex prefixes a wall-time header)."""
    assert not found["error"], found["text"]
    text = found["text"]
    return json.loads(text[text.index("{"):])


def requests_with(fleet: LiveFleet, agent: Agent, needle: str) -> list[Request]:
    return [r for r in fleet.requests(agent) if any(needle in t for t in r.user_texts)]


def message_row(fleet: LiveFleet, message_id: str) -> dict[str, Any] | None:
    return next((m for m in fleet.api("GET", "/api/messages") if m.get("message_id") == message_id), None)


def argv_holding(secret: str) -> list[int]:
    """Every process whose command line contains ``secret``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if secret.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def proc_argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def agent_pid(fleet: LiveFleet, agent: Agent) -> int:
    return fleet.tmux.pane_pid(agent.pane)


def ask_until_connect_is_listed(fleet: LiveFleet, steps: Steps, agent: Agent, prompt: str, answer: str,
                                listed: Callable[[Request], bool] | None = None) -> tuple[Request, int]:
    """The person asks ``prompt`` (the model answers ``answer``) until a request shows the model
    connect's tools (``listed``; by default Claude Code's ``whoami``); returns that request and how
    many prompts it took.

    Claude Code connects its MCP servers in the background while its composer is already up: a prompt
    typed in its first moments (here, as soon as connectd reads the pane idle) can reach the model
    before connect's tools do. What the model sees is what counts, so this asks again until it sees
    them (within the step's deadline) instead of guessing a delay."""
    tries = 0
    while True:
        tries += 1
        before = len(fleet.requests(agent))
        reply = f"{answer} ({tries})"
        fleet.script(agent, [Turn.reply(reply)])
        fleet.type_prompt(agent, prompt)
        request = steps.wait(lambda n=before: fleet.requests(agent)[n] if len(fleet.requests(agent)) > n else None,
                             f"{agent.name}'s model request")
        steps.wait(lambda r=reply: r in fleet.screen(agent) and fleet.ready(agent), f"{agent.name} answered")
        if listed(request) if listed is not None else CLAUDE_PREFIX + "whoami" in request.text:
            return request, tries
        time.sleep(1.0)


def readings(fleet: LiveFleet) -> str:
    """How connectd reads each agent's pane (for a timeout's message)."""
    try:
        views = fleet.api("GET", "/api/agents")
    except Exception as exc:  # noqa: BLE001 - only a diagnostic
        return f"(no readings: {exc})"
    return "\n".join(f"{v.get('pane')}: harness={v.get('harness')} activity={v.get('activity')} "
                     f"composer={v.get('composer')}" for v in views)


def deferred(request: Request) -> bool:
    """Whether this Claude Code release defers connect's tools behind ToolSearch (2.1.332 does: the
    request names them only in a system message) or offers them up front (2.1.300 does: their schemas
    are in the request's tools). The test adapts to either; :func:`load_tools` is the difference."""
    listed = CLAUDE_PREFIX + "send_message"
    assert listed in request.text, "connect's tools are neither offered nor listed"
    return listed not in request.tool_names


def load_tools(request: Request, *tools: str, id: str) -> list[Turn]:
    """The model's turns that make ``tools`` callable: a ToolSearch ``select:`` when the release
    defers them, nothing when it offers them up front."""
    return [Turn.tool(ToolCall("ToolSearch", tool_search_select(*tools), id=id))] if deferred(request) else []


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.support.live install``: install the pinned harnesses and the capture-only ones
    (OpenCode, whose binding test runs the real binary) (CI runs it before the tests, so the npm
    download is not inside a test's deadline)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["install"]:
        print("usage: python -m tests.support.live install", file=sys.stderr)
        return 2
    for name in H.PACKAGES:
        print(f"{name} {H.version(name)}: {H.install(name)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
