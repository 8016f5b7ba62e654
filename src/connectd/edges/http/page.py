"""The owner page: ``/`` (the page), ``/login`` (one-time code to session cookie), its static assets,
and ``POST /api/login-codes``.

Rules (issue 6):

- Nothing works without login. ``GET /`` without a session answers 401 with a page that says how to
  log in; every ``/api/`` route answers 401 (``connectd.edges.http.owner_auth.authenticate``).
- A login code is minted by the person (``POST /api/login-codes`` with the owner token; ``connectd
  token`` shows ``<base>/login?code=...`` and clears it, or writes it to a 0600 file). It is random
  (144 bits, ``cl_``-prefixed so screen tails redact it), kept only as a digest, valid for
  :data:`connectcore.login.CODE_TTL` seconds (minutes) and exactly once; at most
  :data:`connectcore.login.MAX_OPEN_CODES` are open (:func:`connectcore.login.codes_kept`).
- ``GET /login?code=`` exchanges a good code for a session cookie (HttpOnly, SameSite=Strict, Path=/,
  named per port so two daemons on one host do not clobber each other) and redirects (303) to ``/``.
  Which requests may try a code and which refusals are audited is :mod:`connectcore.login`: ``HEAD``
  never redeems, a cross-site navigation (``Sec-Fetch-Site``) is refused, a malformed code is not
  audited, refused logins are rate-limited.
- Sessions survive a daemon restart: they are kept in ``page_sessions.json`` in the data directory
  (0600), by the digest of the cookie value (the cookie itself is never written down), with the
  session's CSRF token and expiry.
- Every request authenticated by the session cookie that is not a read (``GET``/``HEAD``/``OPTIONS``,
  :func:`connectcore.login.csrf_required`; the order of the credentials is
  :func:`connectcore.login.owner_actor`'s) must carry the session's CSRF token in ``X-CSRF-Token`` (the page reads it from a meta tag); one
  without it, or with another, is refused (403) before anything is called. ``LoopbackGuard`` already
  refuses a foreign ``Origin``; SameSite=Strict keeps the cookie off cross-site requests; the token is
  the third lock.
- Each page session has an id and is its own audit actor, ``owner:page:<id>``. The person lists and
  ends sessions (``GET /api/page-sessions``, ``POST /api/page-sessions/{id}/end``, ``connectd
  sessions``, the page's Sessions list); disconnect-all can end them all too.
- The page runs no inline script or style: a Content-Security-Policy allows only this origin's files.
  Agents' text is put on the page as text (``textContent``), never as HTML.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from connectcore import advice
from connectcore import login as LG
from connectcore.effects import Audit
from connectcore.redact import LOGIN_CODE_PREFIX
from connectd.agents.agent_calls import AgentCalls
from connectd.cli import facts
from connectd.daemon.runner import Core
from connectd.edges.http import OwnerAuth, Problem, authenticate, json_response, owner_endpoint, parse_body
from connectd.edges.http.bodies import Empty, Query

log = logging.getLogger("connectd.page")

# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------

SESSION_RE = re.compile(r"[A-Za-z0-9_-]{32,64}")
SESSIONS_FILE = "page_sessions.json"
COOKIE_PREFIX = "connect_session_"
CSRF_HEADER = "x-csrf-token"
PAGE_ACTOR = "owner:page"
SESSION_ID_RE = re.compile(r"[0-9a-f]{8,32}")

STATIC_DIR = Path(__file__).resolve().parent / "static"
TEMPLATES = frozenset({"index.html", "login.html"})  # rendered, never served raw
CONTENT_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
    "": "text/plain; charset=utf-8",  # LICENSE
}

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}

LOGIN_HELP = "Run the command below on the computer that runs connectd, and open the URL it prints."
CODE_REFUSED = "This login link is used, expired or unknown. Run the command below for a new one."
LOGIN_PREVIEW = "This is a one-time connect login link: open it in the browser you will use (a preview does not use it up)."
CROSS_SITE = "Refused: another site sent you here. Open the login link the command below prints yourself."
THROTTLED = "Too many refused logins in the last minute: wait a minute, then run the command below for a new link."

# --------------------------------------------------------------------------------------------------
# Login codes and sessions
# --------------------------------------------------------------------------------------------------


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def cookie_name(port: int | None) -> str:
    return f"{COOKIE_PREFIX}{port or 0}"


@dataclass(frozen=True)
class PageSession:
    """One logged-in browser: the digest of its cookie value, its CSRF token and its life."""

    digest: str
    csrf: str
    created: float
    expires: float
    id: str = ""  # short, not a credential: names the session in the audit log and the list
    agent: str = ""  # the browser's User-Agent at login, for the person to tell sessions apart

    @property
    def actor(self) -> str:
        return f"{PAGE_ACTOR}:{self.id}"

    def view(self, current: bool = False) -> dict[str, object]:
        return {
            "id": self.id,
            "actor": self.actor,
            "created": self.created,
            "expires": self.expires,
            "agent": self.agent,
            "current": current,
        }


class PageSessions:
    """Login codes (memory only, single use) and page sessions (kept in the data directory)."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        code_ttl: float = LG.CODE_TTL,
        session_ttl: float = LG.SESSION_TTL,
    ) -> None:
        self.path = Path(path)
        self.clock = clock
        self.code_ttl = code_ttl
        self.session_ttl = session_ttl
        self._codes: dict[str, float] = {}  # digest -> expires at
        self._sessions: dict[str, PageSession] = self._load()

    # --- codes ------------------------------------------------------------------------------------

    def new_code(self) -> tuple[str, float]:
        """A fresh one-time login code and how many seconds it stays valid."""
        now = self.clock()
        self._codes = LG.codes_kept(self._codes, now)
        code = LOGIN_CODE_PREFIX + secrets.token_urlsafe(18)
        self._codes[_digest(code)] = now + self.code_ttl
        return code, self.code_ttl

    def redeem(self, code: str, agent: str = "") -> tuple[str, PageSession] | None:
        """Exchange a code (once) for a new session: ``(cookie value, session)``, or None."""
        if not LG.CODE_RE.fullmatch(code):
            return None
        expires = self._codes.pop(_digest(code), None)
        now = self.clock()
        if not LG.code_valid(expires, now):
            return None
        value = secrets.token_urlsafe(32)
        session = PageSession(
            _digest(value), secrets.token_urlsafe(32), now, now + self.session_ttl, self._new_id(), agent[:160]
        )
        self._sessions[session.digest] = session
        self._save()
        return value, session

    # --- sessions ---------------------------------------------------------------------------------

    def session_for(self, value: str | None) -> PageSession | None:
        if value is None or not SESSION_RE.fullmatch(value):
            return None
        session = self._sessions.get(_digest(value))
        if session is None or not LG.session_live(session.expires, self.clock()):
            return None
        return session

    def end(self, value: str) -> None:
        if SESSION_RE.fullmatch(value) and self._sessions.pop(_digest(value), None) is not None:
            self._save()

    def _new_id(self) -> str:
        while True:
            new = secrets.token_hex(4)
            if all(s.id != new for s in self._sessions.values()):
                return new

    def live(self) -> list[PageSession]:
        """The sessions that have not expired, oldest first."""
        now = self.clock()
        return sorted((s for s in self._sessions.values() if LG.session_live(s.expires, now)), key=lambda s: (s.created, s.id))

    def end_id(self, session_id: str) -> PageSession | None:
        """End the session with this id (its cookie stops working at once); None if there is none."""
        found = next((s for s in self._sessions.values() if s.id == session_id), None)
        if found is not None:
            del self._sessions[found.digest]
            self._save()
        return found

    def end_all(self) -> list[PageSession]:
        """End every session; the ended ones."""
        ended = self.live()
        if self._sessions:
            self._sessions = {}
            self._save()
        return ended

    def from_request(self, request: Request) -> PageSession | None:
        return self.session_for(request.cookies.get(cookie_name(request.url.port)))

    def cookie(self, request: Request) -> LG.PageCookie | None:
        """The request's page session cookie (None without one): the actor of the live session it
        names (None: expired, ended or unknown) and whether ``X-CSRF-Token`` is that session's token
        (compared in constant time). Whether the token is needed is :func:`connectcore.login.owner_actor`'s."""
        value = request.cookies.get(cookie_name(request.url.port))
        if value is None:
            return None
        session = self.session_for(value)
        if session is None:
            return LG.PageCookie(None)
        sent = request.headers.get(CSRF_HEADER, "")
        return LG.PageCookie(session.actor, hmac.compare_digest(sent.encode("utf-8"), session.csrf.encode("utf-8")))

    # --- the file ---------------------------------------------------------------------------------

    def _load(self) -> dict[str, PageSession]:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return {}
        try:
            with os.fdopen(fd, "r", encoding="utf-8") as f:
                rows = json.load(f)
            now = self.clock()
            sessions = [PageSession(**row) for row in rows]
            # sessions written before they had ids get one now
            sessions = [s if s.id else replace(s, id=secrets.token_hex(4)) for s in sessions]
            return {s.digest: s for s in sessions if LG.session_live(s.expires, now)}
        except (OSError, ValueError, TypeError) as exc:
            log.warning("%s is unreadable (%s): every page must log in again", self.path, exc)
            return {}

    def _save(self) -> None:
        now = self.clock()
        self._sessions = {d: s for d, s in self._sessions.items() if LG.session_live(s.expires, now)}
        rows = [asdict(s) for s in self._sessions.values()]
        fd, tmp = tempfile.mkstemp(prefix=".page_sessions.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                os.fchmod(f.fileno(), 0o600)
                json.dump(rows, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


# --------------------------------------------------------------------------------------------------
# The page and its assets
# --------------------------------------------------------------------------------------------------

_SVG_RE = re.compile(r"<svg\b[^>]*>(.*)</svg>", re.DOTALL)
_VIEWBOX_RE = re.compile(r'viewBox="([0-9 .-]+)"')


def icon_sprite(icons_dir: Path) -> str:
    """The vendored Lucide SVGs as one hidden sprite of ``<symbol id="icon-NAME">`` for ``<use>``."""
    symbols = []
    for path in sorted(icons_dir.glob("*.svg")):
        text = path.read_text(encoding="utf-8")
        body, box = _SVG_RE.search(text), _VIEWBOX_RE.search(text)
        if body is None or box is None:
            raise ValueError(f"{path} is not a Lucide icon SVG")
        inner = " ".join(line.strip() for line in body.group(1).strip().splitlines())
        symbols.append(f'<symbol id="icon-{path.stem}" viewBox="{box.group(1)}">{inner}</symbol>')
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" class="sprite" aria-hidden="true" focusable="false">'
        + "".join(symbols)
        + "</svg>"
    )


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(root: Path) -> dict[str, Asset]:
    """Every file under ``root`` but the templates, by its path relative to ``root`` (a fixed list:
    nothing outside it can be named)."""
    assets: dict[str, Asset] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or rel in TEMPLATES or path.name.startswith("."):
            continue
        kind = CONTENT_TYPES.get(path.suffix)
        if kind is None:
            continue
        body = path.read_bytes()
        assets[rel] = Asset(body, kind, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')
    return assets


def _page(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        body.encode("utf-8"),
        status_code=status,
        media_type="text/html; charset=utf-8",
        headers={**PAGE_HEADERS, **(headers or {})},
    )


class OwnerPage:
    """The page's handlers: the page, the login, the assets, and the owner API routes of its own
    (login codes, logout, page sessions), which run through the owner API's one wrapper."""

    def __init__(
        self, calls: AgentCalls, core: Core, clock: Callable[[], float], auth: OwnerAuth, data_dir: Path
    ) -> None:
        self.calls, self.core, self.clock = calls, core, clock
        self.auth = auth
        self.sessions = PageSessions(Path(data_dir) / SESSIONS_FILE, clock=clock)
        auth.sessions = self.sessions
        self.index_template = ""  # set below, once the login command is known
        # The login command as it runs on this machine, for this daemon's data directory.
        self.login_command = advice.login_command(
            facts.cli_command(), str(Path(data_dir)), str(facts.default_data_dir())
        )
        self.login_template = (STATIC_DIR / "login.html").read_text(encoding="utf-8").replace(
            "{{command}}", html.escape(self.login_command)
        )
        self.index_template = (
            (STATIC_DIR / "index.html")
            .read_text(encoding="utf-8")
            .replace("<!--ICONS-->", icon_sprite(STATIC_DIR / "icons"))
            .replace("{{login_command}}", html.escape(self.login_command, quote=True))
        )
        self.assets = load_assets(STATIC_DIR)
        self.gate = LG.LoginGate()

    def login_page(self, message: str, status: int = 401, headers: dict[str, str] | None = None) -> Response:
        return _page(self.login_template.replace("{{message}}", html.escape(message)), status, headers)

    async def record(self, actor: str, action: str, outcome: str, detail: str = "") -> None:
        await self.core.audit(Audit(actor=actor, action=action, outcome=outcome, detail=detail, at=self.clock()))

    # --- the page and the login -------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        try:
            authenticate(request, self.calls, self.auth)
        except Problem as problem:
            return self.login_page(f"{problem} {LOGIN_HELP}" if problem.error == "session_expired" else LOGIN_HELP)
        session = self.sessions.from_request(request)
        csrf = session.csrf if session is not None else ""
        return _page(self.index_template.replace("{{csrf}}", html.escape(csrf, quote=True)))

    async def login(self, request: Request) -> Response:
        code, now = request.query_params.get("code", ""), self.clock()
        verdict = LG.judge(
            self.gate, now=now, method=request.method, fetch_site=request.headers.get("sec-fetch-site"), code=code
        )
        if verdict is LG.Verdict.HELP:
            return self.login_page(LOGIN_HELP)
        if verdict is LG.Verdict.PREVIEW:
            return self.login_page(LOGIN_PREVIEW, 200)
        if verdict is LG.Verdict.CROSS_SITE:
            return self.login_page(CROSS_SITE, 403)
        if verdict is LG.Verdict.THROTTLED:
            self.gate, audit_it = LG.throttled(self.gate, now)
            if audit_it:
                detail = f"over {LG.REFUSALS_PER_WINDOW} refused logins a minute"
                await self.record(LG.ANONYMOUS, "login", "throttled", detail)
            return self.login_page(THROTTLED, 429, {"Retry-After": str(int(LG.WINDOW))})
        agent = request.headers.get("user-agent", "")
        redeemed = self.sessions.redeem(code, agent) if verdict is LG.Verdict.TRY else None
        if redeemed is None:
            self.gate = LG.refused(self.gate, now)
            if verdict is LG.Verdict.TRY:  # a malformed code is refused, never audited
                await self.record(LG.ANONYMOUS, "login", "refused", "unknown, used or expired login code")
            return self.login_page(CODE_REFUSED)
        value, session = redeemed
        await self.record(session.actor, "login", "done", session.agent)
        response = RedirectResponse("/", status_code=303, headers=PAGE_HEADERS)
        response.set_cookie(
            cookie_name(request.url.port),
            value,
            max_age=int(session.expires - session.created),
            path="/",
            httponly=True,
            samesite="strict",
        )
        return response

    async def static(self, request: Request) -> Response:
        asset = self.assets.get(request.path_params["path"])
        if asset is None:
            return Response(b"not found\n", 404, media_type="text/plain", headers={"X-Content-Type-Options": "nosniff"})
        headers = {"ETag": asset.etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.content_type, headers=headers)

    # --- owner routes of the page (through the owner API's wrapper) -------------------------------

    async def login_codes(self, request: Request, actor: str) -> Any:
        await parse_body(request, Empty)
        code, ttl = self.sessions.new_code()
        await self.record(actor, "login_code", "issued", f"valid {int(ttl)}s, once")
        base = f"http://{request.headers.get('host', '127.0.0.1')}"
        return {"code": code, "url": f"{base}/login?code={code}", "expires_in": ttl}

    async def logout(self, request: Request, actor: str) -> Any:
        await parse_body(request, Empty)
        name = cookie_name(request.url.port)
        value = request.cookies.get(name)
        if value is not None:
            self.sessions.end(value)
        await self.record(actor, "logout", "done")
        response = json_response({"logged_out": True})
        response.delete_cookie(name, path="/", httponly=True, samesite="strict")
        return response

    async def list_sessions(self, request: Request, actor: str) -> Any:
        Query(request, set())
        current = self.sessions.from_request(request)
        return [s.view(current is not None and s.id == current.id) for s in self.sessions.live()]

    async def end_session(self, request: Request, actor: str) -> Any:
        await parse_body(request, Empty)
        session_id = request.path_params["session_id"]
        if not SESSION_ID_RE.fullmatch(session_id):
            raise Problem(400, "bad_session_id", f"a page session id is 8 hex digits, not {session_id[:64]!r}")
        ended = self.sessions.end_id(session_id)
        if ended is None:
            raise Problem(404, "unknown_page_session", f"no live page session {session_id}")
        await self.record(actor, "page_session_end", "done", f"ended {ended.actor}")
        return {"ended": ended.view()}

    def routes(self) -> list[BaseRoute]:
        def api(handler: Callable[[Request, str], Awaitable[Any]]) -> Callable[[Request], Awaitable[Response]]:
            return owner_endpoint(self.calls, self.auth, handler)

        return [
            Route("/", self.index, methods=["GET"]),
            Route("/login", self.login, methods=["GET"]),  # Starlette answers HEAD too: never redeems
            Route("/logout", api(self.logout), methods=["POST"]),
            Route("/static/{path:path}", self.static, methods=["GET"]),
            Route("/api/login-codes", api(self.login_codes), methods=["POST"]),
            Route("/api/page-sessions", api(self.list_sessions), methods=["GET"]),
            Route("/api/page-sessions/{session_id}/end", api(self.end_session), methods=["POST"]),
        ]


def page_routes(
    calls: AgentCalls, core: Core, clock: Callable[[], float], auth: OwnerAuth, data_dir: Path
) -> list[BaseRoute]:
    """The page's routes (mount them before the owner API's catch-all and before ``/mcp``).

    Attaches the page sessions to ``auth`` so :func:`connectd.edges.http.owner_auth.authenticate` accepts
    the session cookie (with its CSRF token) on every owner API route.
    """
    return OwnerPage(calls, core, clock, auth, data_dir).routes()
