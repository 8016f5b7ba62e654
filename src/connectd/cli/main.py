"""The ``connectd`` command line: the daemon (``serve``, ``run``) and a client of its owner API.

Every read takes ``--json``. The client finds the daemon through ``daemon.json`` in the data
directory (written by ``serve``, removed when it exits) and authenticates with the owner token kept
there (0600). Before it sends the token it checks, on Linux, that the socket listening on the
recorded port belongs to our user and is held by the recorded daemon process
(:mod:`connectcore.listener`); anything else is refused without sending it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import platformdirs

from connectcore import advice
from connectd.cli import facts, federate, pair
from connectd.cli.safetext import cell, visible
from connectd.history import cli as history_cli

if TYPE_CHECKING:
    from connectd.daemon.app import Config, Daemon

PRESETS = ("off", "observe", "collaborate")
DEFAULT_PORT = 7878


class CliError(SystemExit):
    """A refusal for the person, on stderr with exit status 1: one line naming the problem and, when
    something fixes it, a ``fix:`` line with the command (no HTTP status, no traceback)."""

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem, self.fix = problem, fix
        super().__init__("\n".join(advice.Advice(f"connectd: {problem}", fix).lines()))

    @classmethod
    def of(cls, given: advice.Advice) -> CliError:
        return cls(given.problem, given.fix)


def default_data_dir() -> Path:
    return facts.default_data_dir()


# --- the daemon ---------------------------------------------------------------------------------------


def write_daemon_info(data_dir: Path, port: int, mcp_url: str) -> None:
    """Where the daemon listens, for the CLI: written whole (temp file + rename), never half."""
    path = data_dir / "daemon.json"
    tmp = path.with_name(f".daemon.json.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"port": port, "pid": os.getpid(), "mcp": mcp_url}))
    os.replace(tmp, path)


def remove_daemon_info(data_dir: Path) -> None:
    """Forget where the daemon listened (on exit): a stale file would point the CLI at whoever binds
    that port next. Only our own record is removed."""
    path = data_dir / "daemon.json"
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def cmd_serve(args: argparse.Namespace) -> int:
    import anyio

    from connectd.daemon.app import Config, serve
    from connectd.daemon.config import load_policy

    data_dir = Path(args.data_dir)
    policy = load_policy(data_dir / "policy.toml") if args.policy is None else load_policy(Path(args.policy))
    config = Config(
        data_dir=data_dir,
        port=args.port,
        tmux_socket=args.tmux_socket,
        tmux_socket_path=args.tmux_socket_path,
        limits=policy.limits,
        cap=policy.cap,
        federation=policy.federation,
        history=not args.no_history,
        launchers=_launchers(data_dir),
        otlp_endpoint=args.otlp_endpoint,
        trusted_releases=frozenset(args.trust_release or ()),
    )
    daemon = start_daemon(config)
    cli = facts.cli_command()
    dd = "" if data_dir == default_data_dir() else f" --data-dir {shlex.quote(str(data_dir))}"

    async def ready(d: Any) -> None:
        write_daemon_info(data_dir, d.port, d.mcp_url)
        print(f"connectd listening on {d.base_url} (MCP endpoint {d.mcp_url})", flush=True)
        # No login code here: it would sit on this terminal's screen for anyone who reads it.
        print(f"owner page: {d.base_url}/  (log in: `{cli} token --open{dd}`, a one-time link)", flush=True)
        warnings = advice.fleet_warnings(
            tmux_server_running=await d.tmux.server_running(), harnesses_on_path=facts.harnesses_on_path(), cli=cli
        )
        for warning in warnings:
            print(f"warning: {warning.problem}\n  fix: {warning.fix}", file=sys.stderr, flush=True)

    try:
        anyio.run(lambda: serve(daemon, ready=ready))
    finally:
        remove_daemon_info(data_dir)
    return 0


def start_daemon(config: Config) -> Daemon:
    """``build_daemon``, with a busy port or a data directory another daemon holds refused in one
    line and its fix (:mod:`connectcore.advice`), not a traceback."""
    import errno

    from connectd.daemon.app import DataDirLocked, build_daemon
    from connectd.edges.http.owner_auth import UnusableSecret

    try:
        return build_daemon(config)
    except DataDirLocked as exc:
        raise CliError.of(advice.daemon_running(str(exc.data_dir), facts.cli_command())) from None
    except UnusableSecret as exc:
        raise CliError.of(advice.unusable_secret(str(exc.path), exc.why)) from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CliError.of(advice.port_in_use(config.port, cli=facts.cli_command())) from None
        raise CliError(f"cannot listen on 127.0.0.1:{config.port}: {exc.strerror or exc}",
                       "run connectd with another --port") from None


def _trusted_release(spec: str) -> tuple[str, str]:
    from connectcore.releases import parse_trusted

    try:
        return parse_trusted(spec)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _launchers(data_dir: Path) -> dict[str, Any]:
    from connectcore import launchers as L

    path = data_dir / "launchers.toml"
    if path.exists():
        return L.parse_launchers_toml(path.read_text())
    return L.builtin_launchers()


def cmd_run(args: argparse.Namespace) -> int:
    """``make run``: serve against the running tmux server (with every option of ``serve``), or an
    isolated demo fleet when none runs or ``--demo`` asks for it; it says which."""
    from connectd.cli.demo import run_demo

    tmux = ("tmux", *(("-L", args.tmux_socket) if args.tmux_socket else ()),
            *(("-S", args.tmux_socket_path) if args.tmux_socket_path else ()))
    running = facts.tmux_server_running(tmux)
    mode = advice.run_mode(demo_asked=args.demo, tmux_server_running=running)
    print(advice.run_mode_line(mode, tmux_server_running=running, cli=facts.cli_command()), flush=True)
    if mode is advice.RunMode.SERVE:
        return cmd_serve(args)
    return run_demo(port=args.port)


# --- the client ---------------------------------------------------------------------------------------


class Client:
    def __init__(self, data_dir: Path, port: int | None) -> None:
        self.data_dir = data_dir
        info_path = data_dir / "daemon.json"
        try:
            info = json.loads(info_path.read_text()) if info_path.exists() else {}
        except (OSError, ValueError):
            info = {}
        if not info:
            wanted = port or DEFAULT_PORT
            raise CliError.of(advice.no_daemon(
                str(data_dir), wanted, served_elsewhere=facts.connectd_serving(wanted),
                port_taken=facts.port_taken(wanted), cli=facts.cli_command(),
            ))
        self.pid = int(info.get("pid") or 0)
        self.port = int(info.get("port") or 0)
        if port is not None and port != self.port:
            raise SystemExit(
                f"connectd: the daemon on {data_dir} listens on port {self.port}, not {port}; "
                "the owner token is sent only to the daemon daemon.json names"
            )
        token_path = data_dir / "owner_token"
        if not token_path.exists():
            raise SystemExit(f"connectd: no owner token in {data_dir} (is the daemon running with this --data-dir?)")
        self.token = token_path.read_text().strip()
        self._verified = False

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def verify(self) -> None:
        """Refuse unless the listener on the port is the recorded daemon of our user (Linux /proc)."""
        if self._verified:
            return
        why = listener_refusal(self.port, self.pid)
        if why is not None:
            raise CliError.of(advice.token_withheld(str(self.data_dir), self.port, why, facts.cli_command()))
        self._verified = True

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.exchange(method, path, body)[0]

    def exchange(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[Any, dict[str, str]]:
        """The answer's JSON and its headers (the paging headers of a list read)."""
        self.verify()
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null"), dict(response.headers.items())
        except urllib.error.HTTPError as exc:
            detail, fix = exc.read().decode(errors="replace"), ""
            try:
                payload = json.loads(detail)
            except json.JSONDecodeError:
                payload = None
            if isinstance(payload, dict):
                detail = str(payload.get("message") or payload.get("error") or detail)
                fix = str(payload.get("fix") or "")
            raise CliError(detail or f"the daemon answered HTTP {exc.code}", fix) from None
        except urllib.error.URLError as exc:
            raise CliError.of(advice.unreachable(str(self.data_dir), self.base, str(exc.reason), facts.cli_command())) from None


def listener_refusal(port: int, pid: int) -> str | None:
    """Read /proc for :func:`connectcore.listener.refusal` (None off Linux: nothing to check with)."""
    from connectcore import listener

    tcp = Path("/proc/net/tcp")
    if not tcp.exists():
        return None
    proc = Path(f"/proc/{pid}")
    try:
        pid_uid: int | None = proc.stat().st_uid if pid > 0 else None
        alive = pid > 0 and proc.is_dir()
    except OSError:
        pid_uid, alive = None, False
    inodes: set[int] = set()
    if alive:
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    link = os.readlink(fd)
                except OSError:
                    continue
                if link.startswith("socket:[") and link.endswith("]"):
                    inodes.add(int(link[8:-1]))
        except OSError:
            pass
    return listener.refusal(
        tcp.read_text(), port=port, pid=pid, uid=os.getuid(), pid_alive=alive, pid_uid=pid_uid,
        socket_inodes=frozenset(inodes),
    )


def _client(args: argparse.Namespace) -> Client:
    return Client(Path(args.data_dir), args.port if args.port != DEFAULT_PORT else None)



def _print(args: argparse.Namespace, payload: Any, lines: list[str]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(payload, indent=2))
    else:
        _print_lines(lines)


def _print_lines(lines: list[str], file: Any = None) -> None:
    """Text-mode output: each line with its controls, bidi and zero-width characters made visible
    (agent- and pane-supplied text is data; a newline inside one never starts a line of its own)."""
    print("\n".join(visible(line) for line in lines) if lines else "(none)", file=file)


def _table(columns: list[str], rows: list[list[str]]) -> None:
    """A table on stdout (``rich``): boxed on a terminal; plain, unwrapped columns in a pipe."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True) if sys.stdout.isatty() else Console(
        width=10_000, no_color=True, highlight=False, soft_wrap=True
    )
    table = Table(*columns, box=box.SIMPLE_HEAD if console.is_terminal else None, header_style="bold",
                  show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*(cell(value) for value in row))  # text, never rich markup
    console.print(table, crop=False)


def _release(agent: dict[str, Any]) -> str:
    """An agent's release as ``connectd agents`` shows it: ``2.1.332``, ``2.1.999 (unverified)``,
    ``unknown``; ``-`` for a pane that is not an agent."""
    status = agent.get("release_status")
    if not status:
        return "-"
    if not agent.get("release"):
        return "unknown"
    return str(agent["release"]) + ("" if status == "verified" else f" ({status})")


def cmd_agents(args: argparse.Namespace) -> int:
    agents = _client(args).call("GET", "/api/agents")
    if args.json:
        print(json.dumps(agents, indent=2))
        return 0
    remote = _client(args).call("GET", "/api/pairing/agents")  # the paired boxes' (none when not federated)
    if not agents:
        print("(none)")
        for warning in _client(args).call("GET", "/api/warnings"):  # why there is nothing, and the fix
            print(f"warning: {warning['problem']}\n  fix: {warning['fix']}", file=sys.stderr)
    else:
        _table(
            ["ADDRESS", "HARNESS", "READING", "CONNECT", "RELEASE", "WINDOW", "TITLE", "CWD"],
            [[str(a["address"]), str(a["harness"]), str(a["activity"]), str(a["connect"]), _release(a),
              a.get("window") or "-", a.get("title") or "", a.get("cwd") or ""] for a in agents],
        )
        from connectcore.reads import waiting_lines

        for a in agents:
            waits = [str(w.get("waits_for") or "") for w in a.get("waiting") or ()]
            for note in (a.get("note"), a.get("release_note"), a.get("session_note"), *waiting_lines(waits)):
                if note:
                    print(visible(f"{a['address']}: {note}"))
    if remote:
        _remote_agents(remote)
    return 0


def _remote_agents(remote: list[dict[str, Any]]) -> None:
    """The paired boxes' agents, after this box's: read-only rows (their owners decide who reaches them;
    nothing here connects or grants them), each with its box and how old that box's list is. Their
    text comes from another machine: printed as text (``_table``'s cells, never markup)."""
    print("\non paired boxes (read-only: their owners grant them; `connectd pair list` for the boxes):")
    _table(
        ["ADDRESS", "BOX", "HARNESS", "READING", "REACHABLE", "LISTED", "TITLE", "REPO"],
        [[str(a["address"]), f"{a['box']['name']} ({a['box']['fingerprint']})", str(a["harness"]),
          str(a.get("activity") or "-"), "yes" if a.get("reachable") else "no", str(a["freshness"]),
          str(a.get("title") or ""), str(a.get("repo") or "")] for a in remote],
    )


def _card_lines(c: dict[str, Any], cli: str = "connectd", dd: str = "") -> list[str]:
    """One card in words, a line each (each escaped on its own when printed): who to whom (panes with
    their session:window), the hop, the question a reply answers, the text, and what each answer allows
    with the command that gives it, as it runs (``cli``: how connectd runs here; ``dd``: its
    ``--data-dir`` when not the default)."""
    words = {key: visible(value) for key, value in c["words"].items()}  # names hold agents' titles
    lines = [
        f"{c['id']}  from {visible(c['sender_name'])}",
        f"    to {visible(c['recipient_name'])}",
        f"    {words['hop']}",
    ]
    if c.get("answers") is not None:
        lines.append(f"    in reply to: {c['answers']!r}")
    lines.append(f"    {c['text'][:200]!r}")
    if c.get("state", "pending") != "pending":  # answered: its state, no countdown, nothing to answer
        lines.append(f"    {visible(c.get('state_words') or c['state'])}")
        return lines
    once, pair, decline = (f"{cli} approve {c['id']}{dd}", f"{cli} approve {c['id']} --pair{dd}", f"{cli} decline {c['id']}{dd}")
    width = max(len(once), len(pair), len(decline))
    lines += [
        f"    {int(c['expires_in'])}s left to answer:",
        f"      {once:<{width}}   {words['approve_once']}",
        f"      {pair:<{width}}   {words['approve_pair']}",
        f"      {decline:<{width}}   {words['decline']}",
    ]
    return lines


def cmd_cards(args: argparse.Namespace) -> int:
    cards = _client(args).call("GET", "/api/cards" + ("?all=1" if args.all else ""))
    data_dir = Path(args.data_dir)
    dd = "" if data_dir == default_data_dir() else f" --data-dir {shlex.quote(str(data_dir))}"
    _print(args, cards, [line for c in cards for line in _card_lines(c, facts.cli_command(), dd)])
    return 0


def _windows(client: Any) -> dict[str, str]:
    """Each live pane's tmux session:window, from the fleet list."""
    return {str(a["pane"]): str(a.get("window") or "") for a in client.call("GET", "/api/agents")}


def cmd_approve(args: argparse.Namespace) -> int:
    result = _client(args).call("POST", f"/api/cards/{args.card}/approve", {"pair": args.pair})
    _print(args, result, [f"{result['id']}: {result['state']}"])
    return 0


def cmd_decline(args: argparse.Namespace) -> int:
    result = _client(args).call("POST", f"/api/cards/{args.card}/decline", {})
    _print(args, result, [f"{result['id']}: {result['state']}"])
    return 0


def cmd_grant(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.target.startswith("%"):
        result = client.call("POST", f"/api/panes/{args.target}/connect", {"preset": args.preset})
    else:
        harness, _, session_id = args.target.partition(":")
        if not session_id:
            raise SystemExit("connectd: target is a pane id (%N) or HARNESS:SESSION_ID")
        result = client.call("POST", "/api/grants", {"harness": harness, "session_id": session_id, "preset": args.preset})
    _print(args, result, _granted(args.target, result))
    return 0


def _granted(target: str, result: dict[str, Any]) -> list[str]:
    """``grant``'s answer in a sentence (and the pane's note, e.g. how its tools arrive)."""
    connect = str(result.get("connect", ""))
    session = result.get("session")
    if isinstance(session, dict):
        session = [session.get("harness"), session.get("session_id")]
    what = f" ({session[0]}:{session[1]})" if isinstance(session, list) and len(session) == 2 and target.startswith("%") else ""
    said = f"{target}{what}: Connect is off" if connect == "off" else f"{target}{what}: Connect set to {connect}"
    return [said, *([f"{target}: {result['note']}"] if result.get("note") else []),
            *(f"{target}: {line}" for line in result.get("cancels_unconfirmed", []))]


def cmd_revoke(args: argparse.Namespace) -> int:
    body = {"pane": args.target} if args.target.startswith("%") else {"principal": args.target}
    result = _client(args).call("POST", "/api/revoke", body)
    _print(args, result, [f"{result['revoked']}: Connect is off (revoked: its next call fails; its queued messages "
                          "and open cards are cancelled)",
                          *(f"{result['revoked']}: {line}" for line in result.get("cancels_unconfirmed", []))])
    return 0


def cmd_disconnect_all(args: argparse.Namespace) -> int:
    result = _client(args).call("POST", "/api/disconnect-all", {})
    count = int(result.get("disconnected", 0))
    _print(args, result, [f"Connect is off for every agent ({count} disconnected)",
                          *result.get("cancels_unconfirmed", [])])
    return 0


def cmd_control(args: argparse.Namespace) -> int:
    result = _client(args).call("POST", "/api/control/stop", {})
    _print(args, result, [f"stopped control: {', '.join(result['stopped'])}"])
    return 0


def cmd_acts(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.decision:
        if not args.act_id:
            raise SystemExit("connectd: acts approve|decline takes an act id")
        result = client.call("POST", f"/api/acts/{args.act_id}/{args.decision}", {})
        _print(args, result, [f"{result['act_id']}: {result['state']}"])
        return 0
    acts = client.call("GET", "/api/acts" + ("?all=1" if args.all else ""))
    _print(args, acts, [f"{a['act_id']}  tier {a['tier']}  {a['state']}  {a['shown']}" for a in acts] or ["no acts"])
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    env: dict[str, str] = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"connectd: --env takes KEY=VALUE, got {item!r}")
        env[key] = value
    if args.here:
        return _launch_here(args, env)
    body: dict[str, Any] = {"launcher": args.launcher, "connect": args.connect, "cwd": os.path.abspath(args.cwd), "env": env}
    if args.session:
        body["session"] = args.session
    if args.control:
        body["control"] = True
    result = _client(args).call("POST", "/api/launch", body)
    role = "control: act and collaborate, every act after your card" if result.get("control") else f"connect: {result['connect']}"
    _print(args, result, [f"launched {result['launcher']} in {result['address']} ({role})"])
    return 0


def _launch_here(args: argparse.Namespace, env: dict[str, str]) -> int:
    """``launch --here``: run the launcher in this pane under a connectd-owned supervisor (this process)."""
    from connectd.agents.launch_here import run_here

    client = _client(args)
    status = run_here(client.call, launcher=args.launcher, connect=args.connect, cwd=os.path.abspath(args.cwd),
                      session=args.session, env=env)
    return status if status >= 0 else 128 - status


def cmd_restart(args: argparse.Namespace) -> int:
    result = _client(args).call("POST", "/api/restart", {"pane": args.pane, "preset": args.preset})
    session = result.get("session") or []
    onto = f" onto {session[0]}:{session[1]}" if len(session) == 2 else ""
    _print(args, result, [f"{args.pane}: restarting{onto}, connected as {args.preset} (once it is idle; "
                          "`connectd agents` shows it when done)"])
    return 0


# --- paged reads ----------------------------------------------------------------------------------


def _limit(value: str) -> int:
    from connectd.edges.http.bodies import MAX_LIMIT

    if not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"--limit must be a whole number from 1 to {MAX_LIMIT}, not {value!r}")
    return int(value)


def _audit_id(value: str) -> str:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"an audit cursor is a record id (a whole number from 0), not {value!r}")
    return value


def _add_paging(p: argparse.ArgumentParser, cursor: Any = str) -> None:
    p.add_argument("--limit", type=_limit, default=100, help="at most this many rows (1 to 1000; default 100)")
    p.add_argument("--before", type=cursor, metavar="CURSOR", help="only rows older than this cursor (a listing's `next`)")
    p.add_argument("--after", type=cursor, metavar="CURSOR", help="only rows newer than this cursor")
    p.add_argument("--oldest-first", action="store_true", help="list oldest first (default: newest first)")
    p.add_argument("--all", action="store_true", help="follow the cursors to the end of the window: every row")


@dataclasses.dataclass
class Page:
    items: list[Any]
    more: bool
    next: dict[str, str] | None  # the cursor flags that continue the listing (--before/--after)


def _read_pages(client: Client, path: str, params: dict[str, str], args: argparse.Namespace) -> Page:
    """Read one page (or, with ``--all``, every page) of a paged owner API list."""
    query = dict(params, limit=str(args.limit), order="oldest" if args.oldest_first else "newest")
    if args.before is not None:
        query["before"] = str(args.before)
    if args.after is not None:
        query["after"] = str(args.after)
    items: list[Any] = []
    while True:
        rows, headers = client.exchange("GET", f"{path}?{urllib.parse.urlencode(query)}")
        items.extend(rows)
        headers = {key.lower(): value for key, value in headers.items()}
        more = headers.get("x-more") == "true"
        nxt = {name: headers[f"x-next-{name}"] for name in ("before", "after") if f"x-next-{name}" in headers}
        if not more or not nxt:
            return Page(items, False, None)
        if not args.all:
            return Page(items, True, {**{k: query[k] for k in ("before", "after") if k in query}, **nxt})
        query.update(nxt)


def _print_page(args: argparse.Namespace, page: Page, lines: list[str]) -> None:
    """``--json``: {"items", "more", "next"}; text: the lines, and on stderr how to read on."""
    if args.json:
        print(json.dumps({"items": page.items, "more": page.more, "next": page.next}, indent=2))
        return
    _print_lines(lines)
    if page.more and page.next:
        flags = " ".join(f"--{key} {value}" for key, value in page.next.items())
        print(
            f"connectd: showing the first {len(page.items)}; more remain: add {flags} for the next page, "
            "or --all for every one",
            file=sys.stderr,
        )


def cmd_messages(args: argparse.Namespace) -> int:
    params = {"pane": args.pane} if args.pane else {}
    client = _client(args)
    page = _read_pages(client, "/api/messages", params, args)
    windows = {} if args.json else _windows(client)
    _print_page(args, page, [_message_line(m, windows) for m in page.items])
    return 0


def _message_line(m: dict[str, Any], windows: dict[str, str]) -> str:
    """One message: who to whom (the recipient placed), its outcome and reason, and while it is not
    final what it waits for (:func:`connectcore.reads.waits_for`). A message across boxes names the
    other box (:func:`connectcore.reads.from_box`, :func:`connectcore.reads.sent_across`): the
    sender's on this box's copy of one from another box, the recipient's on one sent to another box
    (its target is that box's, so it is not placed in this box's windows)."""
    from connectcore.directory import placed

    sender = m["from"] + (f" (box {m['from_box']})" if m.get("from_box") else "")
    to = f"{m['to']} on box {m['to_box']}" if m.get("to_box") else placed(m["to"], windows)
    line = f"{sender} -> {to} {m['message_id']}: {m['outcome']} {m.get('reason') or ''}"
    waits = m.get("waits_for")
    return f"{line.rstrip()}; waits {waits}" if waits and waits != m.get("reason") else line


def _audit_line(row: dict[str, Any], windows: dict[str, str] | None = None) -> str:
    from connectcore.directory import placed, placed_in

    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.get("at") or 0))
    parts = [when, row.get("actor", ""), row.get("action", ""), row.get("outcome", "")]
    for key in ("scope", "target", "message_id", "detail"):
        if row.get(key):
            value = (placed(str(row[key]), windows or {}) if key == "target"
                     else placed_in(str(row[key]), windows or {}) if key == "detail" else row[key])
            parts.append(f"{key}={value}")
    return "  ".join(str(p) for p in parts)


def cmd_audit(args: argparse.Namespace) -> int:
    client = _client(args)
    params = {key: value for key in ("actor", "pane", "outcome") if (value := getattr(args, key))}
    windows = {} if args.json else _windows(client)
    if not args.follow:
        page = _read_pages(client, "/api/audit", params, args)
        _print_page(args, page, [_audit_line(row, windows) for row in page.items])
        return 0
    # --follow: the newest --limit records (or those after --after), then every new one, oldest first,
    # one per line (JSON lines with --json).
    if args.after is not None:
        after = int(args.after)
    else:
        newest = client.call("GET", "/api/audit?" + urllib.parse.urlencode(dict(params, limit=str(args.limit))))
        after = max(0, min((int(row["id"]) for row in newest), default=0) - 1)
    while True:
        query = dict(params, after=str(after), order="oldest", limit="1000")
        for row in client.call("GET", f"/api/audit?{urllib.parse.urlencode(query)}"):
            after = max(after, int(row.get("id", 0)))
            print(json.dumps(row) if args.json else visible(_audit_line(row, windows)), flush=True)
        time.sleep(1.0)


def cmd_restore(args: argparse.Namespace) -> int:
    client = _client(args)
    plan = client.call("GET", "/api/restore")
    print(f"restore {advice.counted(len(plan['items']), 'session')}?")
    for item in plan["items"]:
        print(visible(f"  {item['harness']}:{item['session_id']}  in {item['cwd']}  {item.get('title') or ''}"))
    for skip in plan["skipped"]:
        print(visible(f"  skipped {skip['harness']}:{skip['session_id']}: {skip['reason']}"))
    if not plan["items"]:
        return 0
    if not args.yes and input("relaunch them? [y/N] ").strip().lower() not in {"y", "yes"}:
        print("nothing relaunched")
        return 1
    result = client.call("POST", "/api/restore", {})
    _print(args, result, [f"relaunched {r['session']} in {r['address']}" for r in result["launched"]])
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    """A one-time login link that does not linger: in a 0600 file, opened in the browser, or shown
    on a terminal until Enter (then erased from the screen)."""
    client = _client(args)
    result = client.call("POST", "/api/login-codes", {})
    url, minutes = f"{client.base}/login?code={result['code']}", max(1, int(result["expires_in"] // 60))
    if args.file:
        path = Path(args.file)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(url + "\n")
        print(f"login link written to {path} (0600; one-time, valid {minutes} min)")
        return 0
    if args.open:
        import webbrowser

        if webbrowser.open(url):
            print(f"login link opened in the browser (one-time, valid {minutes} min)")
            return 0
        raise SystemExit("connectd: no browser to open; run `connectd token` or `connectd token --file PATH`")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(url)  # for a pipe or a script: it keeps the link, not a screen
        return 0
    _show_then_erase(
        [url, f"(one-time, valid {minutes} min) Press Enter once it is open; the link is then erased from this screen."],
        float(result["expires_in"]),
    )
    print("login link erased from the screen")
    return 0


def _show_then_erase(lines: list[str], timeout: float) -> None:
    """Show ``lines`` until Enter (or ``timeout``), then erase them: the keypress is not echoed, so
    the cursor is still just below them, and wrapped lines are counted by the terminal's width."""
    import math
    import select
    import shutil
    import termios

    width = max(1, shutil.get_terminal_size((80, 24)).columns)
    rows = sum(max(1, math.ceil(len(line) / width)) for line in lines)
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    quiet = termios.tcgetattr(fd)
    quiet[3] &= ~(termios.ECHO | termios.ICANON)
    try:
        termios.tcsetattr(fd, termios.TCSADRAIN, quiet)
        print("\n".join(lines), flush=True)
        if select.select([sys.stdin], [], [], timeout)[0]:
            os.read(fd, 1024)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        sys.stdout.write(f"\x1b[{rows}F\x1b[0J")  # up to the first line, erase it and everything below
        sys.stdout.flush()


def _ago(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def cmd_sessions(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.action == "end":
        if not args.id:
            raise SystemExit("connectd: sessions end takes the session id (from `connectd sessions`), or --all")
        if args.id == "all":
            if args.disconnect:
                result = client.call("POST", "/api/disconnect-all", {"end_page_sessions": True})
                count = int(result["page_sessions_ended"])
            else:
                ids = [row["id"] for row in client.call("GET", "/api/page-sessions")]
                for session_id in ids:
                    client.call("POST", f"/api/page-sessions/{session_id}/end", {})
                result, count = {"ended": len(ids)}, len(ids)
            _print(args, result, [f"ended {advice.counted(count, 'page session')}"])
            return 0
        result = client.call("POST", f"/api/page-sessions/{args.id}/end", {})
        _print(args, result, [f"ended page session {result['ended']['id']} ({result['ended']['actor']})"])
        return 0
    rows = client.call("GET", "/api/page-sessions")
    if args.json or not rows:
        _print(args, rows, [])
    else:
        _table(["ID", "SINCE", "UNTIL", "BROWSER"],
               [[str(r["id"]), _ago(r["created"]), _ago(r["expires"]), str(r["agent"])[:60]] for r in rows])
    return 0


def cmd_rotate_owner_token(args: argparse.Namespace) -> int:
    """A new owner token: through the running daemon (in force at once), else in the file directly."""
    data_dir = Path(args.data_dir)
    if (data_dir / "daemon.json").exists():
        _client(args).call("POST", "/api/owner-token/rotate", {})
        print("owner token rotated: the old one no longer works (the new one is in the owner_token file, 0600)")
        return 0
    from connectd.edges.http.owner_auth import OWNER_TOKEN_FILE, new_owner_token, write_secret

    if not (data_dir / OWNER_TOKEN_FILE).exists():
        raise SystemExit(f"connectd: no owner token in {data_dir}")
    write_secret(data_dir / OWNER_TOKEN_FILE, new_owner_token())
    print("owner token rotated in the owner_token file (no daemon is running; it reads it at start)")
    return 0


# --- running it as a service, and is this machine ready ---------------------------------------------


def cmd_service(args: argparse.Namespace) -> int:
    from connectd.cli import service

    data_dir = Path(args.data_dir).expanduser().absolute()
    if args.action == "install":
        status, lines = service.install(data_dir, args.port, start=not args.no_start)
    elif args.action == "uninstall":
        status, lines = service.uninstall()
    else:
        status, lines = service.status(data_dir, args.port)
    print("\n".join(lines))
    return status


def cmd_federate(args: argparse.Namespace) -> int:
    """``federate init --name NAME``: this box's keys and name (docs/federation.md, "Box identity")."""
    from connectcore.federation.boxes import BoxError
    from connectd.federation import keys
    from connectd.federation.seal import LocalBox

    if args.action == "provision":
        return pair.cmd_provision(args)
    if args.action is None:
        return federate.cmd_settings(args)
    if not args.name:
        raise CliError("federate init needs --name NAME", "choose a name of a-z, 0-9 and -, at most 32 characters")
    data_dir = Path(args.data_dir).expanduser()
    try:
        local = LocalBox.from_secrets(keys.init(data_dir, args.name))
    except BoxError as exc:
        raise CliError(str(exc), "choose a name of a-z, 0-9 and -, at most 32 characters") from None
    except keys.BoxKeyError as exc:
        raise CliError(str(exc)) from None
    _print(args, {"name": args.name, "box": local.box_id, "fingerprint": local.keys.fingerprint}, [
        f"box {args.name}: id {local.box_id}",
        f"fingerprint {local.keys.fingerprint} (compare it out of band when you pair)",
        f"keys in {data_dir / keys.BOX_KEY_FILE} (0600; never replaced: new keys would be a new box)",
    ])
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from connectd.cli import doctor

    status, text = doctor.report(doctor.run_checks(Path(args.data_dir), args.port), args.json)
    print(text)
    return status


# --- parser -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Parents:
    """The option sets commands share (each is an ``argparse`` parent): ``common`` (--data-dir, --port;
    every command), ``reads`` (--json) and ``daemon`` (the daemon's options: ``serve`` and ``run``)."""

    common: argparse.ArgumentParser
    reads: argparse.ArgumentParser
    daemon: argparse.ArgumentParser


Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What each ``add_*_commands`` adds its commands to."""


def _parents(parser: argparse.ArgumentParser) -> Parents:
    # --data-dir and --port, before the command (`connectd --data-dir X cards`) or after it; the
    # defaults are filled in by parse_args (a subcommand's default would hide a value given before it).
    common = argparse.ArgumentParser(add_help=False)
    for globals_ in (parser, common):
        globals_.add_argument("--data-dir", default=argparse.SUPPRESS,
                              help=f"data directory (default: $CONNECT_DATA_DIR, else {platformdirs.user_data_dir('connect')})")
        globals_.add_argument("--port", type=int, default=argparse.SUPPRESS,
                              help=f"daemon port on 127.0.0.1 (default: {DEFAULT_PORT})")
    reads = argparse.ArgumentParser(add_help=False)
    reads.add_argument("--json", action="store_true", help="print JSON")
    # The daemon's options: `serve` and `run` take the same ones (run serves with them).
    daemon = argparse.ArgumentParser(add_help=False)
    socket_group = daemon.add_mutually_exclusive_group()
    socket_group.add_argument("--tmux-socket", help="tmux socket name (-L)")
    socket_group.add_argument("--tmux-socket-path", help="tmux socket path (-S)")
    daemon.add_argument("--policy", help="policy file (default: policy.toml in the data directory, if present)")
    daemon.add_argument("--no-history", action="store_true", help="serve without the session history index")
    daemon.add_argument("--otlp-endpoint", help="also export the audit log to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318)")
    daemon.add_argument("--trust-release", action="append", type=_trusted_release, metavar="HARNESS@X.Y.Z",
                        help="type messages into agents on this unverified release as on a verified one (make compat "
                             "uses it to verify a release; marked as trusted, not verified); repeatable")
    return Parents(common, reads, daemon)


def add_daemon_commands(sub: Subparsers, parents: Parents) -> None:
    """``serve``, ``run``."""
    p = sub.add_parser("serve", parents=[parents.common, parents.daemon], help="run the daemon")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("run", parents=[parents.common, parents.daemon],
                       help="serve your fleet (as serve) when a tmux server runs, else an isolated demo fleet")
    p.add_argument("--demo", action="store_true", help="the isolated demo fleet even when a tmux server runs (its own "
                   "tmux server and data directory, ~/.local/share/connect-demo on Linux, emptied at each start)")
    p.set_defaults(func=cmd_run)


def add_launch_commands(sub: Subparsers, parents: Parents) -> None:
    """``launch``."""
    p = sub.add_parser("launch", parents=[parents.common, parents.reads], help="open a tmux window running a launcher")
    p.add_argument("launcher")
    p.add_argument("--connect", choices=PRESETS, default="off")
    p.add_argument("--cwd", default=".")
    p.add_argument("--session", help="resume this session id")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment (repeatable)")
    p.add_argument("--control", action="store_true", help="start it as the control agent (at most one runs)")
    p.add_argument("--here", action="store_true", help="run it in this tmux pane, under a supervisor; the shell survives its exit")
    p.set_defaults(func=cmd_launch)


def add_control_commands(sub: Subparsers, parents: Parents) -> None:
    """``control`` (the control agent), ``acts`` (its acts waiting for the person)."""
    p = sub.add_parser("control", parents=[parents.common, parents.reads], help="the control agent: stop it")
    p.add_argument("action", choices=["stop"])
    p.set_defaults(func=cmd_control)

    p = sub.add_parser("acts", parents=[parents.common, parents.reads], help="control's acts waiting for you (approve or decline one)")
    p.add_argument("decision", nargs="?", choices=["approve", "decline"])
    p.add_argument("act_id", nargs="?")
    p.add_argument("--all", action="store_true", help="also acts that reached their outcome")
    p.set_defaults(func=cmd_acts)


def add_grant_commands(sub: Subparsers, parents: Parents) -> None:
    """``agents`` (the fleet), ``grant``, ``revoke``, ``disconnect-all``."""
    p = sub.add_parser("agents", parents=[parents.common, parents.reads],
                       help="the fleet directory, then the paired boxes' agents (read-only; --json: this box's only)")
    p.set_defaults(func=cmd_agents)
    p = sub.add_parser("grant", parents=[parents.common, parents.reads], help="set the Connect preset of an agent session or pane")
    p.add_argument("target", help="%%N (pane shortcut) or HARNESS:SESSION_ID")
    p.add_argument("preset", choices=PRESETS)
    p.set_defaults(func=cmd_grant)
    p = sub.add_parser("revoke", parents=[parents.common, parents.reads], help="turn Connect off for a pane or principal, at once")
    p.add_argument("target")
    p.set_defaults(func=cmd_revoke)
    p = sub.add_parser("disconnect-all", parents=[parents.common, parents.reads], help="turn Connect off for every agent")
    p.set_defaults(func=cmd_disconnect_all)


def add_card_commands(sub: Subparsers, parents: Parents) -> None:
    """``cards`` (Needs you), ``approve``, ``decline``."""
    p = sub.add_parser("cards", parents=[parents.common, parents.reads], help="pending consent cards (Needs you)")
    p.add_argument("--all", action="store_true", help="include answered cards")
    p.set_defaults(func=cmd_cards)
    p = sub.add_parser("approve", parents=[parents.common, parents.reads], help="approve a card")
    p.add_argument("card")
    p.add_argument("--pair", action="store_true", help="approve the pair for the rest of the recipient's life")
    p.set_defaults(func=cmd_approve)
    p = sub.add_parser("decline", parents=[parents.common, parents.reads], help="decline a card")
    p.add_argument("card")
    p.set_defaults(func=cmd_decline)


def add_restart_commands(sub: Subparsers, parents: Parents) -> None:
    """``restart-to-connect``."""
    p = sub.add_parser("restart-to-connect", parents=[parents.common, parents.reads], help="relaunch a running agent onto its session, connected")
    p.add_argument("pane")
    p.add_argument("preset", choices=PRESETS[1:])
    p.set_defaults(func=cmd_restart)


def add_record_commands(sub: Subparsers, parents: Parents) -> None:
    """``messages``, ``audit`` (paged reads of the records)."""
    p = sub.add_parser("messages", parents=[parents.common, parents.reads], help="messages and their outcomes (paged, newest first)")
    p.add_argument("--pane", help="only messages sent from or addressed to this pane (%%N)")
    _add_paging(p)
    p.set_defaults(func=cmd_messages)
    p = sub.add_parser("audit", parents=[parents.common, parents.reads], help="the audit log (paged, newest first)")
    p.add_argument("--actor", help="only this actor (ending in :* for every actor under it)")
    p.add_argument("--pane", help="only records about this pane (%%N)")
    p.add_argument("--outcome", help="only this outcome")
    _add_paging(p, cursor=_audit_id)
    p.add_argument("--follow", action="store_true", help="print the newest --limit records, then each new one, oldest first")
    p.set_defaults(func=cmd_audit)


def add_restore_commands(sub: Subparsers, parents: Parents) -> None:
    """``restore``."""
    p = sub.add_parser("restore", parents=[parents.common, parents.reads], help="relaunch the sessions a lost tmux server held")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_restore)


def add_owner_commands(sub: Subparsers, parents: Parents) -> None:
    """``token``, ``sessions``, ``rotate-owner-token`` (the owner's login)."""
    p = sub.add_parser("token", parents=[parents.common], help="a one-time owner login link (erased from the screen once opened)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--file", help="write the link to this file (0600) instead of the screen")
    where.add_argument("--open", action="store_true", help="open the link in the browser instead of showing it")
    p.set_defaults(func=cmd_token)
    p = sub.add_parser("sessions", parents=[parents.common, parents.reads], help="the owner page's login sessions; `sessions end ID` ends one")
    p.add_argument("action", nargs="?", choices=("list", "end"), default="list")
    p.add_argument("id", nargs="?", help="the session id to end (`all`: every one)")
    p.add_argument("--disconnect", action="store_true", help="with `end all`: also turn Connect off for every agent")
    p.set_defaults(func=cmd_sessions)
    p = sub.add_parser("rotate-owner-token", parents=[parents.common], help="replace the owner token (the old one stops working)")
    p.set_defaults(func=cmd_rotate_owner_token)


def add_machine_commands(sub: Subparsers, parents: Parents) -> None:
    """``service`` (the systemd user unit), ``doctor``."""
    p = sub.add_parser("service", parents=[parents.common], help="run the daemon as a systemd user service (Restart=on-failure)")
    p.add_argument("action", choices=("install", "uninstall", "status"))
    p.add_argument("--no-start", action="store_true", help="with install: enable the unit but do not start it now")
    p.set_defaults(func=cmd_service)
    p = sub.add_parser("doctor", parents=[parents.common, parents.reads], help="is this machine ready? tmux, harness releases, port, data directory, daemon")
    p.set_defaults(func=cmd_doctor)


def add_federate_commands(sub: Subparsers, parents: Parents) -> None:
    """``federate`` and ``pair``."""
    p = sub.add_parser("federate", parents=[parents.common, parents.reads], help="federation across machines: `federate init --name NAME` makes this box's keys; `federate --nats URL` / `--off`")
    p.add_argument("action", nargs="?", choices=("init", "provision"), help="init, provision, or none: --nats URL or --off")
    p.add_argument("--name", help="init: this box's name, a-z 0-9 and -, at most 32 characters (e.g. laptop)")
    pair.add_provision_arguments(p)
    federate.add_settings_arguments(p)
    p.set_defaults(func=cmd_federate)
    pair.add_pair_commands(sub, parents.common, parents.reads)


def build_parser() -> argparse.ArgumentParser:
    """The ``connectd`` parser: one ``add_*_commands`` call per command group, in the order ``--help`` lists them."""
    parser = argparse.ArgumentParser(
        prog="connectd", description="connect: opt-in, audited messaging between coding agents in tmux",
        epilog="--data-dir and --port go before or after the command; $CONNECT_DATA_DIR sets the data directory.",
    )
    parents = _parents(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    add_daemon_commands(sub, parents)
    add_launch_commands(sub, parents)
    add_control_commands(sub, parents)
    add_grant_commands(sub, parents)
    add_card_commands(sub, parents)
    add_restart_commands(sub, parents)
    add_record_commands(sub, parents)
    add_restore_commands(sub, parents)
    add_owner_commands(sub, parents)
    add_machine_commands(sub, parents)
    add_federate_commands(sub, parents)
    history_cli.register(sub)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, then fill in --data-dir and --port where neither place gave them."""
    args = parser.parse_args(argv)
    if getattr(args, "data_dir", None) is None:
        args.data_dir = str(default_data_dir())
    if getattr(args, "port", None) is None:
        args.port = DEFAULT_PORT
    return args


def main(argv: list[str] | None = None) -> int:
    import logging

    logging.basicConfig(level=os.environ.get("CONNECTD_LOG", "WARNING").upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = build_parser()
    args = parse_args(parser, argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return int(func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
