"""Who the person is on the owner API, and the owner page's login: which ``/login`` requests may try a
code, which refusals are audited, how long codes and page sessions live.

Who is asking (specification: shared/seeds/000, "The Connect toggle"; issue 4, "Owner API"),
:func:`owner_actor`, in this order:

- Tunnel headers come first: ``X-Tunnel-User`` or ``X-Tunnel-Secret`` sent makes the request a tunnel
  request, honoured only with both, the user of the shape :data:`TUNNEL_USER_RE` and the secret right
  (``X-Tunnel-User`` alone is never honoured, not even from loopback); actor ``owner:tunnel:<user>``.
  A tunnel request that fails is refused: it never falls back to the other credentials.
- Then ``Authorization: Bearer <owner token>``: actor ``owner``.
- Then, only without an ``Authorization`` header, the page's session cookie: a cookie naming no live
  session is refused (401 ``session_expired``); a request other than a read (:func:`csrf_required`)
  without the session's CSRF token is refused (403 ``csrf``); else the session's own actor.
- Else: a bearer token that is an agent's is refused 403 (``agent_token``), anything else 401.

Login codes and page sessions (issue 6): at most :data:`MAX_OPEN_CODES` unredeemed codes are kept
(minting more drops the expired ones, then the soonest to expire: :func:`codes_kept`); a code is valid
for :data:`CODE_TTL` seconds (:func:`code_valid`), a page session for :data:`SESSION_TTL`
(:func:`session_live`); the boundary instant is expired.

The ``/login`` gate (issue 6; issue 11, items 1 and 5):

- Only a top-level ``GET`` redeems a code. ``HEAD`` (link prefetchers, unfurlers) never uses one up.
- A navigation another site started (``Sec-Fetch-Site`` other than ``same-origin`` or ``none``; ``none``
  is a URL the person typed or opened from a terminal) is refused before the code is looked at.
- A code that is not of the shape the daemon mints is refused without an audit record: anyone who
  can make a browser load a URL could otherwise write rows into the person's audit log.
- Refused logins are rate-limited: at most :data:`REFUSALS_PER_WINDOW` in any
  :data:`WINDOW` seconds; past that every login (good codes too) is answered "try later" without
  looking at the code, and the throttling is audited once per window, not per request.
- A well-formed code that is unknown, used or expired is audited as refused (actor
  :data:`ANONYMOUS`, never the owner: whoever sent it is not known to be the person).

Pure: the caller passes the clock reading and the request's facts (the secrets are compared by the
daemon, in constant time; only the outcomes of those comparisons come here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

CODE_TTL = 300.0  # seconds a login code stays valid (time to open it on a phone)
SESSION_TTL = 30 * 86400.0  # seconds a page session lasts
MAX_OPEN_CODES = 32  # unredeemed codes kept; minting more drops the oldest
#: Methods that only read: a page session's request with another method needs its CSRF token.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Who a tunnel may name: it becomes part of the audit actor ``owner:tunnel:<user>``.
TUNNEL_USER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")
OWNER = "owner"
TUNNEL_ACTOR = "owner:tunnel"
REFUSALS_PER_WINDOW = 10
WINDOW = 60.0
ANONYMOUS = "anonymous"
#: The shape of a login code: the daemon mints ``cl_`` + 24 URL-safe characters; older daemons
#: minted 24 bare ones.
CODE_RE = re.compile(r"(?:cl_)?[A-Za-z0-9_-]{24}")
#: ``Sec-Fetch-Site`` values of a navigation the person started themselves.
OWN_NAVIGATION = frozenset({"same-origin", "none"})


class Verdict(StrEnum):
    HELP = "help"  # no code: show how to log in
    PREVIEW = "preview"  # HEAD: answer without redeeming
    CROSS_SITE = "cross_site"  # refused, not audited
    THROTTLED = "throttled"  # refused without looking at the code
    MALFORMED = "malformed"  # refused, not audited
    TRY = "try"  # look the code up (redeem it once)


@dataclass(frozen=True)
class LoginGate:
    """Recent refused logins and whether this window's throttling was audited already."""

    refused_at: tuple[float, ...] = ()
    throttle_audited_until: float = 0.0


def _recent(gate: LoginGate, now: float) -> tuple[float, ...]:
    return tuple(t for t in gate.refused_at if now - t < WINDOW)


def judge(gate: LoginGate, *, now: float, method: str, fetch_site: str | None, code: str) -> Verdict:
    """What to do with one ``/login`` request."""
    if not code:
        return Verdict.HELP
    if method.upper() != "GET":
        return Verdict.PREVIEW
    if fetch_site is not None and fetch_site.strip().lower() not in OWN_NAVIGATION:
        return Verdict.CROSS_SITE
    if len(_recent(gate, now)) >= REFUSALS_PER_WINDOW:
        return Verdict.THROTTLED
    if not CODE_RE.fullmatch(code):
        return Verdict.MALFORMED
    return Verdict.TRY


def refused(gate: LoginGate, now: float) -> LoginGate:
    """Count one refused login (a malformed, unknown, used or expired code)."""
    return replace(gate, refused_at=(*_recent(gate, now), now))


def throttled(gate: LoginGate, now: float) -> tuple[LoginGate, bool]:
    """A throttled request: the new gate and whether to audit it (once per window)."""
    if now < gate.throttle_audited_until:
        return gate, False
    return replace(gate, throttle_audited_until=now + WINDOW), True


# --- who is asking on the owner API -------------------------------------------------------------------


class OwnerRefusal(StrEnum):
    """Why an owner request is refused; :attr:`status` is its HTTP status, :attr:`error` its code."""

    BAD_TUNNEL = "bad_tunnel"  # tunnel headers without a valid secret (or user)
    SESSION_EXPIRED = "session_expired"  # a page cookie naming no live session
    CSRF = "csrf"  # a page session's non-read without its CSRF token
    AGENT_TOKEN = "agent_token"  # an agent's bearer token
    NO_CREDENTIAL = "no_credential"  # nothing sent
    NOT_OWNER_TOKEN = "not_owner_token"  # an Authorization header that is not the owner token

    @property
    def status(self) -> int:
        return 403 if self in (OwnerRefusal.AGENT_TOKEN, OwnerRefusal.CSRF) else 401

    @property
    def error(self) -> str:
        if self in (OwnerRefusal.SESSION_EXPIRED, OwnerRefusal.CSRF, OwnerRefusal.AGENT_TOKEN):
            return self.value
        return "unauthorized"


@dataclass(frozen=True)
class PageCookie:
    """A page session cookie as sent: the actor of the live session it names (None: no live session)
    and whether the request's ``X-CSRF-Token`` equals that session's."""

    actor: str | None
    csrf_ok: bool = False


def csrf_required(method: str) -> bool:
    """A page session's request needs its CSRF token unless it only reads."""
    return method not in SAFE_METHODS


def tunnel_ok(user: str | None, secret_ok: bool) -> bool:
    """A tunnel request counts only with a user of the allowed shape and the right secret."""
    return user is not None and secret_ok and TUNNEL_USER_RE.fullmatch(user) is not None


def owner_actor(
    *,
    method: str,
    tunnel_user: str | None,
    tunnel_secret_sent: bool,
    tunnel_secret_ok: bool,
    authorization_sent: bool,
    owner_token_ok: bool,
    agent_token: bool,
    cookie: PageCookie | None,
) -> str | OwnerRefusal:
    """The audit actor of an owner request, or why it is refused (the order is the module's rules).

    ``tunnel_secret_ok``: ``X-Tunnel-Secret`` was sent and equals the tunnel secret; ``owner_token_ok``:
    the ``Authorization`` header carries the owner token; ``agent_token``: its bearer token is an
    agent's; ``cookie``: the page session cookie, None when none was sent (or the page is not served).
    """
    if tunnel_user is not None or tunnel_secret_sent:
        if not tunnel_ok(tunnel_user, tunnel_secret_ok):
            return OwnerRefusal.BAD_TUNNEL
        return f"{TUNNEL_ACTOR}:{tunnel_user}"
    if owner_token_ok:
        return OWNER
    if not authorization_sent and cookie is not None:
        if cookie.actor is None:
            return OwnerRefusal.SESSION_EXPIRED
        if csrf_required(method) and not cookie.csrf_ok:
            return OwnerRefusal.CSRF
        return cookie.actor
    if agent_token:
        return OwnerRefusal.AGENT_TOKEN
    return OwnerRefusal.NOT_OWNER_TOKEN if authorization_sent else OwnerRefusal.NO_CREDENTIAL


# --- login codes and page sessions --------------------------------------------------------------------


def code_valid(expires: float | None, now: float) -> bool:
    """A login code (``expires``: when it stops; None: unknown or used) may be redeemed now."""
    return expires is not None and expires > now


def session_live(expires: float, now: float) -> bool:
    """A page session is live strictly before its expiry."""
    return expires > now


K = TypeVar("K")


def codes_kept(codes: Mapping[K, float], now: float, cap: int = MAX_OPEN_CODES) -> dict[K, float]:
    """The open codes (each with when it expires) kept when one more is minted: the live ones, less
    the soonest to expire until there is room for the new one under ``cap``."""
    kept = {k: t for k, t in codes.items() if code_valid(t, now)}
    while kept and len(kept) >= cap:
        del kept[min(kept, key=kept.__getitem__)]
    return kept
