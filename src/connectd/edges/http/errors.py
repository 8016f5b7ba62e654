"""Errors and JSON for every HTTP route: a refusal is ``{"error": <reason code>, "message": <words>}``,
and ``"fix": <the command that fixes it>`` when the refusal names one.

The engine's and the core's refusals map to 4xx by their reason code (:data:`STATUS_BY_REASON`), or
by their class when the code is not listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from starlette.responses import Response

from connectcore import directory as D
from connectcore import grants
from connectcore import hub as H
from connectcore import reads as R
from connectcore._machine import ConnectError
from connectcore.delivery import Message
from connectcore.launchers import LauncherError
from connectd.agents.agent_calls import message_view
from connectd.daemon.ids import EngineError

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
    fix = str(getattr(exc, "fix", "") or "")
    return Problem(status, reason, str(exc), **({"fix": fix} if fix else {}))


def owner_message_view(message: Message, waits_for: str = "", from_box: str | None = None) -> dict[str, Any]:
    """A message as the person sees it: the sender's view plus the text, the recipient and, while it
    is not final, what it waits for (:func:`connectcore.reads.waits_for`); for a message from another
    box, that box (``from_box``, :func:`connectcore.reads.from_box`)."""
    return message_view(message) | {
        "waits_for": waits_for,
        "text": message.text,
        "recipient_pane": message.recipient_pane,
        "recipient_principal": message.recipient_principal,
        "sender": message.sender,
        "state": message.state.value,
        "card": message.card,
        "from_box": from_box,
        "to_box": None,
    }


def owner_sent_across_view(sent: R.SentAcross) -> dict[str, Any]:
    """A message to an agent on another box (an outbox row, :func:`connectcore.reads.sent_across`),
    with the keys of :func:`owner_message_view`: the recipient is the target the other box resolves,
    on ``to_box``; no local ref, pane or card (the card, if any, is the other box's). Its ``outcome``
    is the person's (``cancelling`` while the other box has not confirmed a cancel; the agent is told
    ``queued``)."""
    row = sent.row
    return {
        "message_id": row.identity.id, "ref": None, "outcome": sent.listed or sent.outcome, "reason": sent.reason,
        "to": sent.target, "from": sent.sender_actor, "hop": sent.hop, "conversation": sent.conversation,
        "in_reply_to": None, "created_at": row.created_at, "final_at": row.final_at,
        "waits_for": sent.waits_for, "text": sent.text, "recipient_pane": None, "recipient_principal": None,
        "sender": row.identity.principal, "state": str(row.state), "card": None,
        "from_box": None, "to_box": sent.to_box,
    }

