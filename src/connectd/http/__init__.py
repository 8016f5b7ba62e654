"""The daemon's HTTP surface but ``/mcp``: the owner API under ``/api/`` and the loopback guard in front
of every route.

- :mod:`connectd.http.loopback`: the loopback guard (Host and Origin) on every route.
- :mod:`connectd.http.owner_auth`: who the person is (owner token, tunnel with its secret, page
  session) and the one wrapper every owner route runs through, the page's included.
- :mod:`connectd.http.bodies`: request validation (pydantic models for bodies, query parameters).
- :mod:`connectd.http.events`: the owner event stream (SSE).
- :mod:`connectd.http.routes`: the owner API's routes.
- :mod:`connectd.http.errors`: refusals and JSON.

Every error body is ``{"error": <reason code>, "message": <words for a person>}``.
"""

from __future__ import annotations

from connectd.http.bodies import MAX_BODY_BYTES, MAX_DEPTH, Body, parse_body, read_body
from connectd.http.errors import Problem, json_response, problem_response, refusal
from connectd.http.events import EVENT_BUFFER, KEEPALIVE_SECONDS, EventStream
from connectd.http.loopback import LoopbackGuard
from connectd.http.owner_auth import (
    OWNER_TOKEN_FILE,
    TUNNEL_SECRET_FILE,
    OwnerAuth,
    authenticate,
    bearer_token,
    owner_endpoint,
)
from connectd.http.routes import OwnerApi, owner_routes

__all__ = [
    "EVENT_BUFFER",
    "KEEPALIVE_SECONDS",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "OWNER_TOKEN_FILE",
    "TUNNEL_SECRET_FILE",
    "Body",
    "EventStream",
    "LoopbackGuard",
    "OwnerApi",
    "OwnerAuth",
    "Problem",
    "authenticate",
    "bearer_token",
    "json_response",
    "owner_endpoint",
    "owner_routes",
    "parse_body",
    "problem_response",
    "read_body",
    "refusal",
]
