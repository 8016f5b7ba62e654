"""Who the person is on the owner API (the order of the credentials and each refusal), and how long
login codes and page sessions live: :mod:`connectcore.login` (issue 24, moved from
``connectd/edges/http/owner_auth.py`` and ``page.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore import login
from connectcore.login import OwnerRefusal, PageCookie

NOTHING: dict[str, Any] = {
    "method": "GET",
    "tunnel_user": None,
    "tunnel_secret_sent": False,
    "tunnel_secret_ok": False,
    "authorization_sent": False,
    "owner_token_ok": False,
    "agent_token": False,
    "cookie": None,
}
OWNER_TOKEN = {"authorization_sent": True, "owner_token_ok": True}
AGENT_TOKEN = {"authorization_sent": True, "agent_token": True}
TUNNEL = {"tunnel_user": "alice", "tunnel_secret_sent": True, "tunnel_secret_ok": True}
PAGE = PageCookie("owner:page:ab12cd34", csrf_ok=True)


def actor(**facts: Any) -> str | OwnerRefusal:
    return login.owner_actor(**{**NOTHING, **facts})


def test_tunnel_headers_come_first_and_a_bad_tunnel_never_falls_back_to_another_credential() -> None:
    assert actor(**TUNNEL) == "owner:tunnel:alice"
    assert actor(**TUNNEL, **AGENT_TOKEN) == "owner:tunnel:alice"
    assert actor(**TUNNEL, cookie=PageCookie(None)) == "owner:tunnel:alice"
    refused = [
        {"tunnel_user": "alice"},  # X-Tunnel-User alone: never honoured
        {"tunnel_user": "alice", "tunnel_secret_sent": True},  # a wrong secret
        {"tunnel_secret_sent": True, "tunnel_secret_ok": True},  # the secret without a user
        {**TUNNEL, "tunnel_user": "alice bob"},  # a user that cannot be an actor name
        {**TUNNEL, "tunnel_user": ""},
        {**TUNNEL, "tunnel_user": "-alice"},
    ]
    for tunnel in refused:
        for other in ({}, OWNER_TOKEN, {"cookie": PAGE}):
            assert actor(**tunnel, **other) is OwnerRefusal.BAD_TUNNEL, (tunnel, other)
    assert (OwnerRefusal.BAD_TUNNEL.status, OwnerRefusal.BAD_TUNNEL.error) == (401, "unauthorized")


def test_the_owner_token_is_the_owner_and_beats_a_page_cookie() -> None:
    assert actor(**OWNER_TOKEN) == login.OWNER == "owner"
    assert actor(**OWNER_TOKEN, cookie=PageCookie(None)) == "owner"
    assert actor(**OWNER_TOKEN, method="POST", cookie=PageCookie("owner:page:x", csrf_ok=False)) == "owner"


def test_the_page_cookie_counts_only_without_an_authorization_header() -> None:
    assert actor(cookie=PAGE) == "owner:page:ab12cd34"
    assert actor(authorization_sent=True, cookie=PAGE) is OwnerRefusal.NOT_OWNER_TOKEN
    assert actor(**AGENT_TOKEN, cookie=PAGE) is OwnerRefusal.AGENT_TOKEN


def test_a_cookie_naming_no_live_session_is_refused_not_ignored() -> None:
    for method in ("GET", "POST"):
        assert actor(method=method, cookie=PageCookie(None)) is OwnerRefusal.SESSION_EXPIRED
    assert (OwnerRefusal.SESSION_EXPIRED.status, OwnerRefusal.SESSION_EXPIRED.error) == (401, "session_expired")


def test_a_page_session_needs_its_csrf_token_on_every_request_that_is_not_a_read() -> None:
    no_token = PageCookie("owner:page:ab12cd34", csrf_ok=False)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert login.csrf_required(method)
        assert actor(method=method, cookie=no_token) is OwnerRefusal.CSRF
        assert actor(method=method, cookie=PAGE) == "owner:page:ab12cd34"
    for method in ("GET", "HEAD", "OPTIONS"):
        assert not login.csrf_required(method)
        assert actor(method=method, cookie=no_token) == "owner:page:ab12cd34"
    assert (OwnerRefusal.CSRF.status, OwnerRefusal.CSRF.error) == (403, "csrf")


def test_an_agent_token_is_refused_403_and_anything_else_401() -> None:
    assert actor(**AGENT_TOKEN) is OwnerRefusal.AGENT_TOKEN
    assert (OwnerRefusal.AGENT_TOKEN.status, OwnerRefusal.AGENT_TOKEN.error) == (403, "agent_token")
    assert actor() is OwnerRefusal.NO_CREDENTIAL
    assert actor(authorization_sent=True) is OwnerRefusal.NOT_OWNER_TOKEN
    for refusal in (OwnerRefusal.NO_CREDENTIAL, OwnerRefusal.NOT_OWNER_TOKEN):
        assert (refusal.status, refusal.error) == (401, "unauthorized")


def test_every_refusal_is_401_but_an_agent_token_and_a_missing_csrf_token() -> None:
    assert {r for r in OwnerRefusal if r.status == 403} == {OwnerRefusal.AGENT_TOKEN, OwnerRefusal.CSRF}


def test_codes_live_five_minutes_and_sessions_thirty_days_the_boundary_expired() -> None:
    assert (login.CODE_TTL, login.SESSION_TTL, login.MAX_OPEN_CODES) == (300.0, 30 * 86400.0, 32)
    assert login.code_valid(100.0, 99.9)
    assert not login.code_valid(100.0, 100.0)
    assert not login.code_valid(None, 0.0)  # unknown or used
    assert login.session_live(100.0, 99.9)
    assert not login.session_live(100.0, 100.0)


def test_minting_keeps_at_most_32_open_codes_dropping_the_expired_then_the_soonest_to_expire() -> None:
    now = 1000.0
    full = {f"c{i}": now + 10 + i for i in range(login.MAX_OPEN_CODES)}
    kept = login.codes_kept(full, now)
    assert len(kept) == login.MAX_OPEN_CODES - 1
    assert "c0" not in kept and "c1" in kept
    expired = {**{f"c{i}": now + 10 + i for i in range(30)}, "old": now, "older": now - 5}
    assert login.codes_kept(expired, now) == {f"c{i}": now + 10 + i for i in range(30)}
    few = {"a": now + 1, "b": now + 2}
    assert login.codes_kept(few, now) == few
    assert login.codes_kept(few, now, cap=2) == {"b": now + 2}


@pytest.mark.parametrize("user", ["alice", "a", "alice@example.org", "bob.smith+x", "A" * 128])
def test_a_tunnel_user_of_the_allowed_shape_counts_with_the_secret(user: str) -> None:
    assert login.tunnel_ok(user, True)
    assert not login.tunnel_ok(user, False)


@pytest.mark.parametrize("user", [None, "", "A" * 129, "al ice", "al\nice", "_alice", "alice:x"])
def test_a_tunnel_user_of_another_shape_never_counts(user: str | None) -> None:
    assert not login.tunnel_ok(user, True)


def test_the_owner_api_words_every_refusal_the_core_can_return() -> None:
    from connectd.edges.http.owner_auth import REFUSAL_WORDS

    assert set(REFUSAL_WORDS) == set(OwnerRefusal)
