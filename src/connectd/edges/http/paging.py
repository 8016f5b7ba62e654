"""Paging for the owner API's list reads (``/api/audit``, ``/api/messages``).

Rules (issue 14, item 6):

- A list read answers at most ``limit`` rows (1 to :data:`~connectd.edges.http.bodies.MAX_LIMIT`, default
  :data:`~connectd.edges.http.bodies.DEFAULT_LIMIT`), **newest first** by default; ``order=oldest`` walks
  the other way (what ``connectd audit --follow`` and the page's "newer" button do).
- ``before=CURSOR`` / ``after=CURSOR`` bound the window (both may be given). A cursor is the one a
  listing gave: an audit record's id, or a message's opaque cursor.
- The body stays a JSON array. Whether the read stopped short is in the headers: ``X-More: true`` and
  ``Link: <...>; rel="next"`` (RFC 8288) naming the same query with the cursor that continues it, plus
  ``X-Next-Before`` or ``X-Next-After`` holding that cursor alone. ``X-More: false`` means the window
  was read to its end.
- A malformed cursor, a bad order or a limit out of range is a 400 naming the parameter.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from connectd.edges.http.bodies import Query, bad
from connectd.edges.http.errors import json_response

T = TypeVar("T")

ORDERS = ("newest", "oldest")


def newest_first(query: Query) -> bool:
    value = query.text("order")
    if value is None or value == "newest":
        return True
    if value == "oldest":
        return False
    raise bad("bad_parameter", f"query parameter 'order' must be newest or oldest, not {value[:64]!r}")


def audit_cursor(query: Query, name: str) -> int | None:
    """An audit cursor: a record id (a whole number from 0)."""
    value = query.text(name)
    if value is None:
        return None
    if not re.fullmatch(r"[0-9]{1,15}", value):
        raise bad(
            "bad_parameter",
            f"query parameter {name!r} must be an audit record id (a whole number from 0), not {value[:64]!r}",
        )
    return int(value)


def encode_message_cursor(created_at: float, ref: str) -> str:
    raw = json.dumps([created_at, ref], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def message_cursor(query: Query, name: str) -> tuple[float, str] | None:
    """A message cursor: the opaque string a listing gave (``X-Next-Before``, ``next``)."""
    value = query.text(name)
    if value is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        created_at, ref = json.loads(raw)
        if isinstance(created_at, bool) or not isinstance(created_at, int | float) or not isinstance(ref, str):
            raise ValueError
        if not math.isfinite(created_at):
            raise ValueError
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise bad(
            "bad_cursor",
            f"query parameter {name!r} is not a message cursor (pass the one a listing gave back): {value[:64]!r}",
        ) from None
    return float(created_at), ref


def page_response(
    request: Request, rows: Sequence[T], limit: int, *, newest: bool, cursor: Callable[[T], str],
    view: Callable[[T], Any] = lambda row: row,
) -> Response:
    """Answer the first ``limit`` of ``rows`` (fetched with ``limit + 1``: one more says there is more)."""
    more = len(rows) > limit
    shown = list(rows[:limit])
    headers = {"X-More": "true" if more else "false"}
    if more and shown:
        name = "before" if newest else "after"
        token = cursor(shown[-1])
        params = {key: value for key, value in request.query_params.items() if key != name}
        params[name] = token
        headers[f"X-Next-{name.capitalize()}"] = token
        headers["Link"] = f'<{request.url.path}?{urlencode(params)}>; rel="next"'
    return json_response([view(row) for row in shown], headers=headers)
