"""The owner API under ``/api/`` and the loopback guard in front of every route.

Rules (specification: shared/seeds/000; issue 4, "Owner API"):

- Every request, on every route (``/api/``, ``/mcp``, the page), must name this daemon's loopback
  address in ``Host`` (``127.0.0.1:PORT``, ``localhost:PORT`` or ``[::1]:PORT``; else 421), and an
  ``Origin``, when sent, must be one of the same three as ``http://`` origins (else 403). This stops
  DNS rebinding and cross-site requests from a browser.
- The owner API answers only the person: ``Authorization: Bearer <owner token>`` (the token file in
  the data directory, compared in constant time), or ``X-Tunnel-User`` together with
  ``X-Tunnel-Secret`` equal to the tunnel secret in the data directory. ``X-Tunnel-User`` alone is
  never honoured, not even from loopback. An agent's token is refused (403), anything else is 401.
- The audit actor of the person's actions is ``owner``, or ``owner:tunnel:<user>`` through a tunnel.
- Bad input (missing field, wrong type, unknown field or preset, non-JSON body) gets a 400 whose JSON
  names the problem, and nothing changes: every field is checked before the engine is called.
- The engine's and the core's refusals map to 4xx JSON by their reason code (:data:`STATUS_BY_REASON`).

Every error body is ``{"error": <reason code>, "message": <words for a person>}``.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import logging
import math
import os
import re
import secrets
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore._machine import ConnectError
from connectcore.consent import Decision
from connectcore.delivery import Message
from connectcore.effects import Audit
from connectcore.grants import Preset
from connectcore.launchers import LauncherError
from connectd.engine import Engine, EngineError, message_view

log = logging.getLogger("connectd.http")

# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------

OWNER_TOKEN_FILE = "owner_token"
TUNNEL_SECRET_FILE = "tunnel_secret"
SECRET_FILE_MODE = 0o600
DATA_DIR_MODE = 0o700

#: Who a tunnel may name: it becomes part of the audit actor ``owner:tunnel:<user>``.
TUNNEL_USER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")
#: A pane in a path or body: ``%N`` (or the bare number, for scripts that cannot encode ``%``).
PANE_RE = re.compile(r"%?([0-9]{1,9})")
BEARER_RE = re.compile(r"Bearer[ \t]+([^ \t]+)[ \t]*", re.IGNORECASE)

MAX_BODY_BYTES = 64 * 1024
MAX_STRING = 4096
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
EVENT_BUFFER = 256
KEEPALIVE_SECONDS = 15.0
SSE_RETRY_MS = 2000

PRESET_NAMES = ", ".join(p.value for p in Preset)

#: HTTP status of a refusal, by the reason code the engine or the core gives.
STATUS_BY_REASON: Mapping[str, int] = {
    # the thing named does not exist (or no longer does)
    "unknown_card": 404,
    "unknown_principal": 404,
    "unknown_message": 404,
    "unknown_target": 404,
    "unknown_launcher": 404,
    "no_pane": 404,
    # it exists, but its state does not allow the request
    "card_closed": 409,
    "not_connected": 409,
    "ambiguous_binding": 409,
    "ambiguous": 409,
    "stale_incarnation": 409,
    "unconnectable": 409,
    "not_restartable": 409,
    "no_tmux_session": 409,
    "restart_running": 409,
    "token_reused": 409,
    "principal_reused": 409,
    # the policy forbids it
    "over_cap": 403,
    "act_not_grantable": 403,
    # the request names something malformed
    "bad_target": 400,
    "bad_env": 400,
    "bad_session_id": 400,
    "bad_endpoint": 400,
    "invalid": 400,
    "bad_preset": 400,
    # the launched program did not stay up
    "launch_failed": 422,
}

#: Status of a refusal whose reason is not in :data:`STATUS_BY_REASON`, by its class.
STATUS_BY_ERROR: tuple[tuple[type[Exception], int], ...] = (
    (H.UnknownItem, 404),
    (D.TargetError, 404),
    (grants.GrantError, 409),
    (LauncherError, 400),
    (EngineError, 400),
    (ConnectError, 409),
)

# --------------------------------------------------------------------------------------------------
# Owner credentials
# --------------------------------------------------------------------------------------------------


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


def _read_or_create_secret(path: Path) -> str:
    """The secret in ``path``, created (0600, never following a symlink) at first start."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, SECRET_FILE_MODE)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "r", encoding="utf-8") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if info.st_mode & 0o077:
            log.warning(
                "%s was readable by others (mode %o): tightening it to 0600", path, info.st_mode & 0o777
            )
            os.fchmod(f.fileno(), SECRET_FILE_MODE)
        value = f.read().strip()
    if len(value) < 16 or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(
            f"{path} does not hold a usable secret (at least 16 printable characters, no spaces)"
        )
    return value


class OwnerAuth:
    """The person's credentials: the owner token and the tunnel secret, from the data directory.

    Only the owner token is kept in plain text (``connectd token`` prints it); the tunnel secret is
    kept as a digest, and both are compared as digests in constant time.
    """

    def __init__(self, owner_token: str, tunnel_secret: str) -> None:
        self.owner_token = owner_token
        self._owner_digest = _digest(owner_token)
        self._tunnel_digest = _digest(tunnel_secret)
        #: The owner page's login sessions (``connectd.page.PageSessions``), set when the page is served.
        self.sessions: Any = None

    @classmethod
    def load_or_create(cls, data_dir: Path) -> OwnerAuth:
        data_dir = Path(data_dir)
        data_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        return cls(
            _read_or_create_secret(data_dir / OWNER_TOKEN_FILE),
            _read_or_create_secret(data_dir / TUNNEL_SECRET_FILE),
        )

    def check_bearer(self, header_value: str | None) -> bool:
        """Whether an ``Authorization`` header carries the owner token."""
        token = bearer_token(header_value)
        return token is not None and hmac.compare_digest(_digest(token), self._owner_digest)

    def check_tunnel(self, user: str | None, secret: str | None) -> bool:
        """``X-Tunnel-User`` counts only with ``X-Tunnel-Secret`` equal to the tunnel secret."""
        if user is None or secret is None or not TUNNEL_USER_RE.fullmatch(user):
            return False
        return hmac.compare_digest(_digest(secret), self._tunnel_digest)


def bearer_token(header_value: str | None) -> str | None:
    if header_value is None:
        return None
    match = BEARER_RE.fullmatch(header_value)
    return match.group(1) if match else None


# --------------------------------------------------------------------------------------------------
# Errors and JSON
# --------------------------------------------------------------------------------------------------


class Problem(Exception):
    """A refusal with its HTTP status, reason code and words for a person."""

    def __init__(self, status: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.extra = extra


def _jsonable(value: Any) -> Any:
    if isinstance(value, Message):
        return owner_message_view(value)
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, default=_jsonable, separators=(",", ":"))


def json_response(payload: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        _dumps(payload).encode("utf-8"),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff", **(headers or {})},
    )


def problem_response(problem: Problem) -> Response:
    headers = {"WWW-Authenticate": 'Bearer realm="connectd owner API"'} if problem.status == 401 else None
    return json_response(
        {"error": problem.error, "message": str(problem), **problem.extra}, problem.status, headers
    )


def refusal(exc: Exception) -> Problem:
    """A 4xx for a refusal the engine or the core raised, by its reason code or its class."""
    reason = str(getattr(exc, "reason", "") or type(exc).__name__)
    status = STATUS_BY_REASON.get(reason)
    if status is None:
        status = next((code for kind, code in STATUS_BY_ERROR if isinstance(exc, kind)), 400)
    return Problem(status, reason, str(exc))


def owner_message_view(message: Message) -> dict[str, Any]:
    """A message as the person sees it: the sender's view plus the text and the recipient."""
    return message_view(message) | {
        "text": message.text,
        "recipient_pane": message.recipient_pane,
        "recipient_principal": message.recipient_principal,
        "sender": message.sender,
        "state": message.state.value,
        "card": message.card,
    }


# --------------------------------------------------------------------------------------------------
# Input checks: each names the problem; nothing is called before all of them pass
# --------------------------------------------------------------------------------------------------


def bad(error: str, message: str) -> Problem:
    return Problem(400, error, message)


async def read_body(request: Request) -> dict[str, Any]:
    """The JSON object in the body (``{}`` when empty), at most :data:`MAX_BODY_BYTES`."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise Problem(413, "body_too_large", f"the body must be at most {MAX_BODY_BYTES} bytes of JSON")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise Problem(
                    413, "body_too_large", f"the body must be at most {MAX_BODY_BYTES} bytes of JSON"
                )
            chunks.append(chunk)
    except ClientDisconnect:
        raise bad("bad_body", "the client went away while sending the body") from None
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise Problem(
            415, "bad_content_type", f"send the body as application/json, not {media or 'no content type'!r}"
        )
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad("bad_json", f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad("bad_json", f"the body must be a JSON object, not {type(body).__name__}")
    return body


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def only_fields(body: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad(
            "unknown_field",
            f"unknown field {unknown[0]!r} (expected: {', '.join(sorted(allowed)) or 'none'})",
        )


def _type_name(value: Any) -> str:
    return (
        "null"
        if value is None
        else {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}.get(
            type(value), type(value).__name__
        )
    )


def str_field(body: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    if name not in body or (body[name] is None and not required):
        if required:
            raise bad("missing_field", f"missing field {name!r}")
        return None
    value = body[name]
    if not isinstance(value, str):
        raise bad("wrong_type", f"field {name!r} must be a string, not {_type_name(value)}")
    if not value.strip():
        raise bad("empty_field", f"field {name!r} must not be empty")
    if len(value) > MAX_STRING or any(not c.isprintable() for c in value):
        raise bad("bad_field", f"field {name!r} must be at most {MAX_STRING} printable characters")
    return value


def required_str(body: Mapping[str, Any], name: str) -> str:
    value = str_field(body, name)
    assert value is not None
    return value


def bool_field(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise bad("wrong_type", f"field {name!r} must be true or false, not {_type_name(value)}")
    return value


def parse_preset(value: Any, name: str = "preset") -> Preset:
    if not isinstance(value, str):
        raise bad("wrong_type", f"field {name!r} must be one of {PRESET_NAMES}, not {_type_name(value)}")
    try:
        return Preset(value.strip().lower())
    except ValueError:
        raise bad(
            "unknown_preset", f"unknown preset {value[:64]!r} (expected one of {PRESET_NAMES})"
        ) from None


def preset_field(body: Mapping[str, Any], name: str = "preset") -> Preset:
    if name not in body:
        raise bad("missing_field", f"missing field {name!r} (one of {PRESET_NAMES})")
    return parse_preset(body[name], name)


def parse_pane(value: Any, name: str = "pane") -> str:
    match = PANE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        shown = value[:64] if isinstance(value, str) else _type_name(value)
        raise bad("bad_pane", f"{name} must be a tmux pane id like %3 (in a URL path: %253), not {shown!r}")
    return f"%{int(match.group(1))}"


def env_field(body: Mapping[str, Any], name: str = "env") -> dict[str, str]:
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad("wrong_type", f"field {name!r} must be an object of strings, not {_type_name(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise bad("wrong_type", f"{name}[{key!r}] must be a string, not {_type_name(item)}")
    return dict(value)


class Query:
    """Query parameters, checked: unknown ones and repeated ones are refused."""

    def __init__(self, request: Request, allowed: set[str]) -> None:
        params = request.query_params
        unknown = sorted(set(params.keys()) - allowed)
        if unknown:
            raise bad(
                "unknown_parameter",
                f"unknown query parameter {unknown[0]!r} (expected: {', '.join(sorted(allowed)) or 'none'})",
            )
        for key in params:
            if len(params.getlist(key)) > 1:
                raise bad("repeated_parameter", f"query parameter {key!r} given more than once")
        self.params = params

    def text(self, name: str) -> str | None:
        value = self.params.get(name)
        if value is None or value == "":
            return None
        if len(value) > MAX_STRING or any(not c.isprintable() for c in value):
            raise bad(
                "bad_parameter", f"query parameter {name!r} must be at most {MAX_STRING} printable characters"
            )
        return value

    def flag(self, name: str) -> bool:
        value = self.params.get(name)
        if value is None:
            return False
        lowered = value.lower()
        if lowered in {"1", "true", "yes", ""}:
            return True
        if lowered in {"0", "false", "no"}:
            return False
        raise bad("bad_parameter", f"query parameter {name!r} must be 1 or 0, not {value[:64]!r}")

    def number(self, name: str) -> float | None:
        value = self.params.get(name)
        if value is None or value == "":
            return None
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise bad(
                "bad_parameter",
                f"query parameter {name!r} must be a number (seconds since the epoch), not {value[:64]!r}",
            )
        return number

    def integer(
        self, name: str, *, default: int | None = None, low: int = 0, high: int | None = None
    ) -> int | None:
        value = self.params.get(name)
        if value is None or value == "":
            return default
        if (
            not re.fullmatch(r"[0-9]{1,12}", value)
            or int(value) < low
            or (high is not None and int(value) > high)
        ):
            bounds = f"from {low}" + (f" to {high}" if high is not None else "")
            raise bad(
                "bad_parameter",
                f"query parameter {name!r} must be a whole number {bounds}, not {value[:64]!r}",
            )
        return int(value)

    def limit(self) -> int:
        value = self.integer("limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        assert value is not None
        return value


# --------------------------------------------------------------------------------------------------
# The loopback guard (every route)
# --------------------------------------------------------------------------------------------------


class LoopbackGuard:
    """Pure ASGI middleware: refuse a foreign ``Host`` (421) or ``Origin`` (403) on every route."""

    def __init__(self, app: ASGIApp, *, port: int) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be 1-65535, not {port!r}")
        self.app = app
        self.port = port
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"})
        self.origins = frozenset(f"http://{host}" for host in self.hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"]
        origins = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"origin"]
        problem: Problem | None = None
        if len(hosts) != 1 or hosts[0].strip().lower() not in self.hosts:
            shown = hosts[0][:200] if len(hosts) == 1 else f"{len(hosts)} Host headers"
            problem = Problem(
                421,
                "foreign_host",
                f"Host {shown!r} is not this daemon: use http://127.0.0.1:{self.port}/",
                host=shown,
            )
        elif origins and (len(origins) != 1 or origins[0].strip().lower() not in self.origins):
            shown = origins[0][:200] if len(origins) == 1 else f"{len(origins)} Origin headers"
            problem = Problem(
                403,
                "foreign_origin",
                f"Origin {shown!r} may not call this daemon: only pages served from 127.0.0.1:{self.port} may",
                origin=shown,
            )
        if problem is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": problem.error})
        else:
            await problem_response(problem)(scope, receive, send)


# --------------------------------------------------------------------------------------------------
# Server-Sent Events: the owner event stream
# --------------------------------------------------------------------------------------------------


class EventStream:
    """``/api/events``: every dict the engine publishes, as ``data: <json>``, until the client goes.

    The subscription is registered for exactly the life of the response: it is discarded when the
    client disconnects, when the server stops the response, or when the engine dropped it because
    its buffer overflowed (then an ``overflow`` event tells the page to refetch; EventSource
    reconnects by itself).
    """

    def __init__(self, engine: Engine, keepalive: float) -> None:
        self.engine = engine
        self.keepalive = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        subscribers = self.engine.subscribers.owner
        sender, events = anyio.create_memory_object_stream[dict[str, Any]](EVENT_BUFFER)
        subscribers.add(sender)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-store"),
                        (b"x-accel-buffering", b"no"),
                        (b"x-content-type-options", b"nosniff"),
                    ],
                }
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._until_disconnect, receive, tg.cancel_scope)
                await self._stream(sender, events, send)
                tg.cancel_scope.cancel()
        except OSError:  # the client went away mid-write
            pass
        finally:
            subscribers.discard(sender)
            sender.close()
            events.close()

    async def _stream(
        self,
        sender: MemoryObjectSendStream[dict[str, Any]],
        events: MemoryObjectReceiveStream[dict[str, Any]],
        send: Send,
    ) -> None:
        subscribers = self.engine.subscribers.owner
        await self._write(send, f"retry: {SSE_RETRY_MS}\n: connected\n\n")
        while True:
            try:
                item: dict[str, Any] | None = events.receive_nowait()
            except anyio.WouldBlock:
                if sender not in subscribers:
                    await self._write(send, 'event: overflow\ndata: {"topic":"overflow"}\n\n', more=False)
                    return
                item = None
                with anyio.move_on_after(self.keepalive):
                    item = await events.receive()
            await self._write(send, ": keep-alive\n\n" if item is None else f"data: {_dumps(item)}\n\n")

    @staticmethod
    async def _write(send: Send, text: str, *, more: bool = True) -> None:
        await send({"type": "http.response.body", "body": text.encode("utf-8"), "more_body": more})

    @staticmethod
    async def _until_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return


# --------------------------------------------------------------------------------------------------
# Routes
# --------------------------------------------------------------------------------------------------

Handler = Callable[[Request, str], Awaitable[Any]]


def authenticate(request: Request, engine: Engine, auth: OwnerAuth) -> str:
    """The audit actor of an owner request, or a 401/403 :class:`Problem`."""
    headers = request.headers
    tunnel_user = headers.get("x-tunnel-user")
    tunnel_secret = headers.get("x-tunnel-secret")
    if tunnel_user is not None or tunnel_secret is not None:
        if not auth.check_tunnel(tunnel_user, tunnel_secret):
            raise Problem(
                401,
                "unauthorized",
                "X-Tunnel-User is honoured only with a valid X-Tunnel-Secret (the tunnel_secret file in the data directory)",
            )
        return f"owner:tunnel:{tunnel_user}"
    authorization = headers.get("authorization")
    if auth.check_bearer(authorization):
        return "owner"
    if authorization is None and auth.sessions is not None:
        # The page's session cookie; raises for a dead session or a non-read without the CSRF token.
        actor: str | None = auth.sessions.authenticate(request)
        if actor is not None:
            return actor
    token = bearer_token(authorization)
    if token is not None and engine.principal_for(token) is not None:
        raise Problem(403, "agent_token", "agent tokens are not valid on the owner API")
    if authorization is None:
        raise Problem(
            401, "unauthorized", "send Authorization: Bearer <owner token> (`connectd token` prints it)"
        )
    raise Problem(401, "unauthorized", "that is not the owner token (`connectd token` prints it)")


def _call_with_by(fn: Callable[..., Awaitable[Any]], *args: Any, by: str) -> Awaitable[Any]:
    """Pass ``by=`` (the audit actor) when the engine method takes it."""
    try:
        takes_by = "by" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_by = False
    return fn(*args, by=by) if takes_by else fn(*args)


def owner_routes(
    engine: Engine,
    auth: OwnerAuth,
    history: object | None = None,
    *,
    keepalive: float = KEEPALIVE_SECONDS,
) -> list[BaseRoute]:
    """The owner API's routes (mount them before ``/mcp``; wrap the whole app in :class:`LoopbackGuard`)."""

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                actor = authenticate(request, engine, auth)
                result = await handler(request, actor)
            except Problem as problem:
                return problem_response(problem)
            except (EngineError, ConnectError) as exc:
                return problem_response(refusal(exc))
            if isinstance(result, Response):
                return result
            return json_response(result)

        run.__name__ = handler.__name__
        return run

    async def record(
        actor: str, action: str, outcome: str, target: str | None = None, detail: str = ""
    ) -> None:
        await engine.audit(
            Audit(
                actor=actor, action=action, outcome=outcome, target=target, detail=detail, at=engine.clock()
            )
        )

    # --- reads --------------------------------------------------------------------------------

    async def agents(request: Request, actor: str) -> Any:
        Query(request, set())
        return engine.agents()

    async def cards(request: Request, actor: str) -> Any:
        query = Query(request, {"all"})
        return engine.cards(include_closed=query.flag("all"))

    async def launchers(request: Request, actor: str) -> Any:
        Query(request, set())
        return [
            {
                "name": launcher.name,
                "harness": launcher.harness,
                "opaque": launcher.opaque is not None,
                "connectable": launcher.connectable,
                "reason": launcher.unconnectable_reason,
                "restartable": launcher.restartable,
                "restart_refusal": launcher.restart_refusal,
            }
            for launcher in sorted(engine.launchers.values(), key=lambda item: item.name)
        ]

    async def messages(request: Request, actor: str) -> Any:
        query = Query(request, {"pane", "principal", "limit"})
        pane = query.text("pane")
        pane = parse_pane(pane) if pane is not None else None
        principal, limit = query.text("principal"), query.limit()
        rows = await anyio.to_thread.run_sync(
            lambda: engine.store.messages(pane=pane, principal=principal, limit=limit)
        )
        return [owner_message_view(m) if isinstance(m, Message) else m for m in rows]

    async def audit(request: Request, actor: str) -> Any:
        query = Query(request, {"actor", "pane", "outcome", "since", "until", "after", "limit"})
        pane = query.text("pane")
        filters = {
            "actor": query.text("actor"),
            "pane": parse_pane(pane) if pane is not None else None,
            "outcome": query.text("outcome"),
            "since": query.number("since"),
            "until": query.number("until"),
            "after_id": query.integer("after", default=0),
            "limit": query.limit(),
        }
        return await anyio.to_thread.run_sync(lambda: engine.store.audit(**filters))

    async def events(request: Request, actor: str) -> Any:
        Query(request, set())
        return _AsResponse(EventStream(engine, keepalive))

    async def session_dirs(request: Request, actor: str) -> Any:
        query = Query(request, {"limit"})
        limit = query.integer("limit", default=20, low=1, high=MAX_LIMIT)
        recent = getattr(history, "recent_dirs", None)
        if recent is None:
            return []
        try:
            return await anyio.to_thread.run_sync(lambda: recent(limit))
        except ConnectError as exc:  # the history index's own refusals
            raise bad("history", str(exc)) from None

    # --- the person's decisions ---------------------------------------------------------------

    async def approve(request: Request, actor: str) -> Any:
        body = await read_body(request)
        only_fields(body, {"pair"})
        pair = bool_field(body, "pair", False)
        decision = Decision.APPROVE_PAIR if pair else Decision.APPROVE_ONCE
        return await engine.decide(request.path_params["card_id"], decision, by=actor)

    async def decline(request: Request, actor: str) -> Any:
        body = await read_body(request)
        only_fields(body, set())
        return await engine.decide(request.path_params["card_id"], Decision.DECLINE, by=actor)

    async def set_grant(request: Request, actor: str) -> Any:
        body = await read_body(request)
        only_fields(body, {"harness", "session_id", "preset"})
        harness, session_id = required_str(body, "harness"), required_str(body, "session_id")
        preset = preset_field(body)
        await engine.set_grant((harness, session_id), preset, by=actor)
        return {"session": {"harness": harness, "session_id": session_id}, "connect": preset.value}

    async def pane_connect(request: Request, actor: str) -> Any:
        pane = parse_pane(request.path_params["pane"], "the pane in the path")
        body = await read_body(request)
        only_fields(body, {"preset"})
        preset = preset_field(body)
        return await engine.set_pane_preset(pane, preset, by=actor)

    async def revoke(request: Request, actor: str) -> Any:
        body = await read_body(request)
        only_fields(body, {"principal", "pane"})
        if ("principal" in body) == ("pane" in body):
            raise bad("missing_field", "give exactly one of 'principal' (a principal id) or 'pane' (%N)")
        if "pane" in body:
            pane = parse_pane(body["pane"])
            record = engine.directory.panes.get(pane)
            if record is None:
                raise Problem(404, "unknown_target", f"no live pane {pane}")
            principal = grants.principal_at(engine.hub.book, record.token)
            if principal is None:
                raise Problem(409, "not_connected", f"{pane} holds no connected agent")
            principal_id = principal.id
        else:
            principal_id = required_str(body, "principal")
            if principal_id not in engine.hub.book.principals:
                raise Problem(404, "unknown_principal", f"no principal {principal_id[:128]!r}")
        await engine.revoke_principals([principal_id], by=actor)
        root = engine.hub.book.principals[grants.canonical(engine.hub.book, principal_id)]
        return {"revoked": grants.actor_name(root), "principal": root.id}

    async def disconnect_all(request: Request, actor: str) -> Any:
        body = await read_body(request)
        only_fields(body, set())
        return {"disconnected": await engine.disconnect_all(by=actor)}

    async def launch(request: Request, actor: str) -> Any:
        body = await read_body(request)
        only_fields(body, {"launcher", "connect", "cwd", "session", "env"})
        name = required_str(body, "launcher")
        preset = preset_field(body, "connect")
        cwd = required_str(body, "cwd")
        session = str_field(body, "session", required=False)
        env = env_field(body)
        if not os.path.isabs(cwd) or not os.path.isdir(cwd):
            raise bad("bad_cwd", f"cwd must be an existing absolute directory, not {cwd[:256]!r}")
        try:
            result = await engine.launch(name, preset=preset, cwd=cwd, session=session, extra_env=env)
        except (EngineError, ConnectError) as exc:
            problem = refusal(exc)
            await record(actor, "launch", "refused", name[:128], problem.error)
            raise problem from None
        await record(
            actor, "launch", "done", result.get("pane"), f"launcher={name} connect={result.get('connect')}"
        )
        return result

    async def restart(request: Request, actor: str) -> Any:
        body = await read_body(request)
        only_fields(body, {"pane", "preset"})
        if "pane" not in body:
            raise bad("missing_field", "missing field 'pane'")
        pane = parse_pane(body["pane"])
        preset = preset_field(body)
        restart_to_connect = getattr(engine, "restart_to_connect", None)
        if restart_to_connect is None:
            raise Problem(501, "not_implemented", "restart-to-connect is not available in this daemon")
        result = await _call_with_by(restart_to_connect, pane, preset, by=actor)
        return result if result is not None else {"pane": pane, "connect": preset.value, "restarting": True}

    async def not_found(request: Request, actor: str) -> Any:
        allowed = sorted(
            {
                m
                for route in routes[:-1]
                if route.matches(request.scope)[0] is Match.PARTIAL
                for m in route.methods or ()
            }
        )
        if allowed:
            raise Problem(
                405,
                "method_not_allowed",
                f"{request.url.path} takes {' or '.join(allowed)}, not {request.method}",
            )
        raise Problem(404, "not_found", f"no owner API route {request.method} {request.url.path}")

    get, post = ["GET"], ["POST"]
    routes: list[Route] = [
        Route("/api/agents", endpoint(agents), methods=get),
        Route("/api/cards", endpoint(cards), methods=get),
        Route("/api/cards/{card_id}/approve", endpoint(approve), methods=post),
        Route("/api/cards/{card_id}/decline", endpoint(decline), methods=post),
        Route("/api/grants", endpoint(set_grant), methods=post),
        Route("/api/panes/{pane}/connect", endpoint(pane_connect), methods=post),
        Route("/api/revoke", endpoint(revoke), methods=post),
        Route("/api/disconnect-all", endpoint(disconnect_all), methods=post),
        Route("/api/launch", endpoint(launch), methods=post),
        Route("/api/launchers", endpoint(launchers), methods=get),
        Route("/api/restart", endpoint(restart), methods=post),
        Route("/api/messages", endpoint(messages), methods=get),
        Route("/api/audit", endpoint(audit), methods=get),
        Route("/api/events", endpoint(events), methods=get),
        Route("/api/sessions/dirs", endpoint(session_dirs), methods=get),
        Route("/api/{rest:path}", endpoint(not_found), methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
    ]
    return list(routes)


class _AsResponse(Response):
    """Wrap a raw ASGI app (the event stream) as a Starlette response."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)
