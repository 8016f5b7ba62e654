"""The owner page's login: which ``/login`` requests may try a code, and which refusals are audited.

Rules (issue 6; issue 11, items 1 and 5):

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

Pure: the caller passes the clock reading and the request's facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum

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
