"""The daemon's HTTP surface but ``/mcp``: the owner API under ``/api/`` and the loopback guard in front
of every route.

- :mod:`connectd.edges.http.loopback`: the loopback guard (Host and Origin) on every route.
- :mod:`connectd.edges.http.owner_auth`: who the person is (owner token, tunnel with its secret, page
  session) and the one wrapper every owner route runs through, the page's included.
- :mod:`connectd.edges.http.bodies`: request validation (pydantic models for bodies, query parameters).
- :mod:`connectd.edges.http.events`: the owner event stream (SSE).
- :mod:`connectd.edges.http.routes`: the owner API's routes, over its parts by surface (``fleet``,
  ``listings``, ``decisions``, ``access``, ``launching``).
- :mod:`connectd.edges.http.errors`: refusals and JSON.
- :mod:`connectd.edges.http.page`: the owner page, its login and its assets (``static/``).

Every error body is ``{"error": <reason code>, "message": <words for a person>}``.
"""

from __future__ import annotations

from connectd.edges.http.bodies import MAX_BODY_BYTES, MAX_DEPTH, Body, parse_body, read_body
from connectd.edges.http.errors import Problem, json_response, problem_response, refusal
from connectd.edges.http.events import EVENT_BUFFER, KEEPALIVE_SECONDS, EventStream
from connectd.edges.http.loopback import LoopbackGuard
from connectd.edges.http.owner_auth import (
    OWNER_TOKEN_FILE,
    TUNNEL_SECRET_FILE,
    OwnerAuth,
    authenticate,
    bearer_token,
    owner_endpoint,
)
from connectd.edges.http.routes import OwnerApi, owner_routes

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
