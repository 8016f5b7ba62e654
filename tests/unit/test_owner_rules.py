"""The owner-side rules of issue 11, pure: the login gate (item 5), the listener check (item 3) and
the MCP session caps (item 4)."""

from __future__ import annotations

from connectcore import listener, login, mcp_sessions
from connectcore.login import LoginGate, Verdict

GOOD = "cl_" + "A1b2" * 6


def test_only_a_get_the_person_started_may_try_a_well_formed_code() -> None:
    gate = LoginGate()
    assert login.judge(gate, now=0, method="GET", fetch_site=None, code="") is Verdict.HELP
    assert login.judge(gate, now=0, method="HEAD", fetch_site=None, code=GOOD) is Verdict.PREVIEW
    for site in ("cross-site", "same-site", "CROSS-SITE"):
        assert login.judge(gate, now=0, method="GET", fetch_site=site, code=GOOD) is Verdict.CROSS_SITE
    for site in (None, "none", "same-origin"):
        assert login.judge(gate, now=0, method="GET", fetch_site=site, code=GOOD) is Verdict.TRY
    for junk in ("x", "cl_short", "A" * 200, "cl_" + "!" * 24):
        assert login.judge(gate, now=0, method="GET", fetch_site=None, code=junk) is Verdict.MALFORMED


def test_refused_logins_throttle_for_a_window_and_the_throttle_is_audited_once() -> None:
    gate = LoginGate()
    for i in range(login.REFUSALS_PER_WINDOW):
        assert login.judge(gate, now=i, method="GET", fetch_site=None, code=GOOD) is Verdict.TRY
        gate = login.refused(gate, i)
    assert login.judge(gate, now=20, method="GET", fetch_site=None, code=GOOD) is Verdict.THROTTLED
    gate, first = login.throttled(gate, 20)
    gate, second = login.throttled(gate, 21)
    assert (first, second) == (True, False)
    late = login.REFUSALS_PER_WINDOW + login.WINDOW
    assert login.judge(gate, now=late, method="GET", fetch_site=None, code=GOOD) is Verdict.TRY


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1EC6 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0
   1: 0100007F:1EC7 0100007F:AA67 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0 100 0 0 10 0
   2: 0100007F:1EC8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  2000        0 4444 1 0 100 0 0 10 0
"""


def test_the_token_goes_only_to_our_users_listener_held_by_the_recorded_daemon() -> None:
    def why(port: int, **kw: object) -> str | None:
        args: dict[str, object] = {"pid": 7, "uid": 1000, "pid_alive": True, "pid_uid": 1000, "socket_inodes": frozenset({4242})}
        args.update(kw)
        return listener.refusal(TCP, port=port, **args)  # type: ignore[arg-type]

    assert why(0x1EC6) is None
    assert "not held by the daemon" in str(why(0x1EC6, socket_inodes=frozenset({1})))
    assert "is not running" in str(why(0x1EC6, pid_alive=False))
    assert "another user" in str(why(0x1EC6, pid_uid=0))
    assert "nothing listens" in str(why(0x1EC7))  # a connected socket, not a listener
    assert "another user (uid 2000)" in str(why(0x1EC8, socket_inodes=frozenset({4444})))
    assert "nothing listens" in str(why(9))


def test_session_caps_per_principal_for_revoked_tokens_and_in_all() -> None:
    admit = mcp_sessions.admit
    assert admit(known=False, connected=False, held=0, total=0).reason == "unknown_token"  # type: ignore[union-attr]
    assert admit(known=True, connected=True, held=mcp_sessions.PER_PRINCIPAL - 1, total=0) is None
    assert admit(known=True, connected=True, held=mcp_sessions.PER_PRINCIPAL, total=0).reason == "too_many_sessions"  # type: ignore[union-attr]
    assert admit(known=True, connected=False, held=0, total=0) is None  # one, to be told "not connected"
    assert admit(known=True, connected=False, held=1, total=0).reason == "revoked_sessions"  # type: ignore[union-attr]
    assert admit(known=True, connected=True, held=0, total=mcp_sessions.TOTAL).reason == "daemon_full"  # type: ignore[union-attr]


def test_a_refusal_is_audited_once_per_principal_until_it_opens_a_session_again() -> None:
    seen: frozenset[str] = frozenset()
    seen, first = mcp_sessions.audit_refusal(seen, "p")
    seen, again = mcp_sessions.audit_refusal(seen, "p")
    seen, other = mcp_sessions.audit_refusal(seen, "q")
    assert (first, again, other) == (True, False, True)
    seen = mcp_sessions.admitted(seen, "p")
    assert mcp_sessions.audit_refusal(seen, "p")[1] is True


# --- pinned by the fourth mutation run (2026-12-06, docs/quality.md): each test names what it kills ---


def test_a_listener_of_another_user_on_every_address_is_seen_and_refused() -> None:
    """A socket on 0.0.0.0:port listens on 127.0.0.1:port too: another user's must refuse the token
    (kills ``"00000000"`` garbled, and the listener's port dropped)."""
    table = TCP + "   3: 00000000:1EC9 00000000:0000 0A 00000000:00000000 00:00000000 00000000  3000        0 4545 1 0\n"
    assert listener.listeners(table, 0x1EC9) == [listener.Listener(0x1EC9, 3000, 4545)]
    why = listener.refusal(table, port=0x1EC9, pid=7, uid=1000, pid_alive=True, pid_uid=1000, socket_inodes=frozenset({4545}))
    assert why == "the listener on 127.0.0.1:7881 belongs to another user (uid 3000)"


def test_a_malformed_line_does_not_hide_the_lines_after_it_and_ten_fields_are_enough() -> None:
    """A line whose numbers do not parse is skipped, not the end of the table (kills ``continue`` ->
    ``break``); a line of exactly the ten fields read is read (kills ``< 10`` -> ``<= 10`` / ``< 11``)."""
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1EC9 00000000:0000 0A 00000000:00000000 00:00000000 00000000  zz 0 4545 1 0\n"
        "   1: 0100007F:1EC9 00000000:0000 0A 00000000:00000000 00:00000000 00000000  3000 0 4646 1 0\n"
        "   2: 0100007F:1ECA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 4747\n"
    )
    assert listener.listeners(table, 0x1EC9) == [listener.Listener(0x1EC9, 3000, 4646)]
    assert listener.listeners(table, 0x1ECA) == [listener.Listener(0x1ECA, 1000, 4747)]


def test_each_session_refusal_says_why_in_words() -> None:
    admit = mcp_sessions.admit
    assert admit(known=False, connected=False, held=0, total=0) == mcp_sessions.Refusal(
        "unknown_token", "this token was never issued by connect"
    )
    assert admit(known=True, connected=True, held=0, total=mcp_sessions.TOTAL) == mcp_sessions.Refusal(
        "daemon_full", f"the daemon holds {mcp_sessions.TOTAL} MCP sessions, its most; close one first"
    )
    assert admit(known=True, connected=False, held=1, total=0) == mcp_sessions.Refusal(
        "revoked_sessions", "this agent is not connected; it may keep 1 session to be told so"
    )
    held = mcp_sessions.PER_PRINCIPAL
    assert admit(known=True, connected=True, held=held, total=0) == mcp_sessions.Refusal(
        "too_many_sessions", f"this agent holds {held} MCP sessions, its most; close one first"
    )


def test_the_login_window_counts_back_from_now_and_its_boundary_instant_is_outside() -> None:
    """Refusals late on the clock still throttle (kills ``now - t`` -> ``now + t``); a refusal exactly
    WINDOW old no longer counts (kills ``<`` -> ``<=``)."""
    gate = LoginGate()
    for _ in range(login.REFUSALS_PER_WINDOW):
        gate = login.refused(gate, 1000.0)
    assert login.judge(gate, now=1000.0 + login.WINDOW - 1, method="GET", fetch_site=None, code=GOOD) is Verdict.THROTTLED
    assert login.judge(gate, now=1000.0 + login.WINDOW, method="GET", fetch_site=None, code=GOOD) is Verdict.TRY


def test_the_throttle_is_audited_again_at_the_instant_its_window_ends() -> None:
    gate, first = login.throttled(LoginGate(), 100.0)
    assert first and gate.throttle_audited_until == 100.0 + login.WINDOW
    assert login.throttled(gate, 100.0 + login.WINDOW - 0.5)[1] is False
    assert login.throttled(gate, 100.0 + login.WINDOW)[1] is True


def test_minting_past_the_cap_drops_the_code_soonest_to_expire_not_the_first_by_name() -> None:
    now = 50.0
    assert login.codes_kept({"a": now + 2, "b": now + 1}, now, cap=2) == {"a": now + 2}
