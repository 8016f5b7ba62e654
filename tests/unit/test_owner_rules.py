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
