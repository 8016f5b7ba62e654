"""Owner authentication: who the person is on every owner route, and the one wrapper every owner
route (the API's and the page's) runs through.

Rules (specification: shared/seeds/000, "The Connect toggle"; issue 4, "Owner API"); the order in
which the credentials count and what each outcome is are :func:`connectcore.login.owner_actor`'s, this
module compares the secrets:

- The owner API answers only the person: ``Authorization: Bearer <owner token>`` (the token file in
  the data directory, compared in constant time), or ``X-Tunnel-User`` together with
  ``X-Tunnel-Secret`` equal to the tunnel secret in the data directory, or the owner page's session
  cookie (with its CSRF token on every request that is not a read). ``X-Tunnel-User`` alone is never
  honoured, not even from loopback. An agent's token is refused (403), anything else is 401.
- The audit actor of the person's actions is ``owner`` (the token), ``owner:tunnel:<user>`` (through
  a tunnel) or ``owner:page:<session id>`` (a logged-in page).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from connectcore import login as LG
from connectcore._machine import ConnectError
from connectcore.redact import OWNER_TOKEN_PREFIX
from connectd.daemon.ids import EngineError
from connectd.edges.http.errors import Problem, json_response, problem_response, refusal
from connectd.store.store import StoreUnavailable

if TYPE_CHECKING:
    from connectd.agents.agent_calls import AgentCalls

log = logging.getLogger("connectd.http")

OWNER_TOKEN_FILE = "owner_token"
TUNNEL_SECRET_FILE = "tunnel_secret"
SECRET_FILE_MODE = 0o600
DATA_DIR_MODE = 0o700

BEARER_RE = re.compile(r"Bearer[ \t]+([^ \t]+)[ \t]*", re.IGNORECASE)


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


def new_owner_token() -> str:
    """A fresh owner token (256 bits; its prefix lets every screen tail redact it)."""
    return OWNER_TOKEN_PREFIX + secrets.token_urlsafe(32)


class UnusableSecret(ValueError):
    """A secret file of the data directory that cannot be used (empty, garbled, not a regular file)."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path, self.why = path, why


def _durable_temp(path: Path, value: str) -> Path:
    """``value`` in a fresh 0600 file beside ``path``, written and fsynced (not yet under its name)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), SECRET_FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(value + "\n")
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _sync_dir(path: Path) -> None:
    """Make a name made or replaced in ``path``'s directory durable."""
    fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_secret(path: Path, value: str) -> None:
    """Replace the secret in ``path`` whole (0600 temp file, fsync, rename, fsync of the directory):
    never half written, and never an empty file after a crash or a failing disk."""
    tmp = _durable_temp(path, value)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _sync_dir(path)


def _read_or_create_secret(path: Path, make: Callable[[], str] = lambda: secrets.token_urlsafe(32)) -> str:
    """The secret in ``path``, created (0600, never following a symlink) at first start.

    Created durably: written and fsynced under a temporary name, then linked to its name (which fails
    if another process made it first: theirs is kept), then the directory fsynced. Written in place,
    a disk that failed or a power cut right after the first start left an empty file, and the daemon
    refused to start (found by tests/integration/test_store_faults.py's read-only test).
    """
    if not path.exists() and not path.is_symlink():
        tmp = _durable_temp(path, make())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        _sync_dir(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "r", encoding="utf-8") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnusableSecret(path, "is not a regular file")
        if info.st_mode & 0o077:
            log.warning(
                "%s was readable by others (mode %o): tightening it to 0600", path, info.st_mode & 0o777
            )
            os.fchmod(f.fileno(), SECRET_FILE_MODE)
        value = f.read().strip()
    if len(value) < 16 or any(c.isspace() or not c.isprintable() for c in value):
        raise UnusableSecret(path, "does not hold a usable secret (at least 16 printable characters, no spaces)")
    return value


class EndedSession(Protocol):
    """A page session as the owner API records its end (``connectd.edges.http.page.PageSession``)."""

    @property
    def actor(self) -> str: ...


class SessionAuth(Protocol):
    """The page's sessions as :func:`authenticate` sees them (``connectd.edges.http.page.PageSessions``)."""

    def cookie(self, request: Request) -> LG.PageCookie | None:
        """The request's page session cookie (None without one): its live session's actor, and
        whether the request carries that session's CSRF token."""
        ...

    def end_all(self) -> Sequence[EndedSession]:
        """End every page session; the ended ones (each with an ``actor``)."""
        ...


class OwnerAuth:
    """The person's credentials: the owner token and the tunnel secret, from the data directory.

    Only the owner token is kept in plain text (``connectd token`` prints it); the tunnel secret is
    kept as a digest, and both are compared as digests in constant time.
    """

    def __init__(self, owner_token: str, tunnel_secret: str, data_dir: Path | None = None) -> None:
        self.data_dir = data_dir
        self.owner_token = owner_token
        self._owner_digest = _digest(owner_token)
        self._tunnel_digest = _digest(tunnel_secret)
        #: The owner page's login sessions (``connectd.edges.http.page.PageSessions``), set when the page is served.
        self.sessions: SessionAuth | None = None

    @classmethod
    def load_or_create(cls, data_dir: Path) -> OwnerAuth:
        data_dir = Path(data_dir)
        data_dir.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
        return cls(
            _read_or_create_secret(data_dir / OWNER_TOKEN_FILE, new_owner_token),
            _read_or_create_secret(data_dir / TUNNEL_SECRET_FILE),
            data_dir,
        )

    def rotate_owner_token(self) -> None:
        """A new owner token, in the file and in force at once; the old one stops working."""
        if self.data_dir is None:
            raise Problem(409, "no_data_dir", "this daemon keeps no owner token file to rotate")
        token = new_owner_token()
        write_secret(self.data_dir / OWNER_TOKEN_FILE, token)
        self.owner_token, self._owner_digest = token, _digest(token)

    def check_bearer(self, header_value: str | None) -> bool:
        """Whether an ``Authorization`` header carries the owner token."""
        token = bearer_token(header_value)
        return token is not None and hmac.compare_digest(_digest(token), self._owner_digest)

    def check_tunnel_secret(self, secret: str | None) -> bool:
        """Whether an ``X-Tunnel-Secret`` header was sent and equals the tunnel secret."""
        return secret is not None and hmac.compare_digest(_digest(secret), self._tunnel_digest)

    def check_tunnel(self, user: str | None, secret: str | None) -> bool:
        """Whether tunnel headers are honoured (:func:`connectcore.login.tunnel_ok`)."""
        return LG.tunnel_ok(user, self.check_tunnel_secret(secret))


def bearer_token(header_value: str | None) -> str | None:
    if header_value is None:
        return None
    match = BEARER_RE.fullmatch(header_value)
    return match.group(1) if match else None



#: The words of each refusal (:class:`connectcore.login.OwnerRefusal`; the core decides which).
REFUSAL_WORDS = {
    LG.OwnerRefusal.BAD_TUNNEL: "X-Tunnel-User is honoured only with a valid X-Tunnel-Secret (the tunnel_secret file in the data directory)",
    LG.OwnerRefusal.SESSION_EXPIRED: "this page's login expired or was ended.",
    LG.OwnerRefusal.CSRF: "refused: this request lacks the page's CSRF token (X-CSRF-Token header)",
    LG.OwnerRefusal.AGENT_TOKEN: "agent tokens are not valid on the owner API",
    LG.OwnerRefusal.NO_CREDENTIAL: "send Authorization: Bearer <owner token> (`connectd token` prints it)",
    LG.OwnerRefusal.NOT_OWNER_TOKEN: "that is not the owner token (`connectd token` prints it)",
}


def authenticate(request: Request, calls: AgentCalls, auth: OwnerAuth) -> str:
    """The audit actor of an owner request, or a 401/403 :class:`Problem`: the credentials are compared
    here, the order and the outcome are :func:`connectcore.login.owner_actor`'s (``calls`` tells an
    agent's token)."""
    headers = request.headers
    tunnel_user = headers.get("x-tunnel-user")
    tunnel_secret = headers.get("x-tunnel-secret")
    authorization = headers.get("authorization")
    token = bearer_token(authorization)
    verdict = LG.owner_actor(
        method=request.method,
        tunnel_user=tunnel_user,
        tunnel_secret_sent=tunnel_secret is not None,
        tunnel_secret_ok=auth.check_tunnel_secret(tunnel_secret),
        authorization_sent=authorization is not None,
        owner_token_ok=auth.check_bearer(authorization),
        agent_token=token is not None and calls.principal_for(token) is not None,
        cookie=auth.sessions.cookie(request) if auth.sessions is not None else None,
    )
    if isinstance(verdict, LG.OwnerRefusal):
        raise Problem(verdict.status, verdict.error, REFUSAL_WORDS[verdict])
    return verdict


Handler = Callable[[Request, str], Awaitable[Any]]


def owner_endpoint(calls: AgentCalls, auth: OwnerAuth, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """The one wrapper of every owner route: authenticate, run, answer JSON; refusals become 4xx."""

    async def run(request: Request) -> Response:
        try:
            actor = authenticate(request, calls, auth)
            result = await handler(request, actor)
        except Problem as problem:
            return problem_response(problem)
        except (EngineError, ConnectError) as exc:
            return problem_response(refusal(exc))
        except StoreUnavailable as exc:
            return problem_response(Problem(503, exc.reason, str(exc)))
        if isinstance(result, Response):
            return result
        return json_response(result)

    run.__name__ = handler.__name__
    return run
