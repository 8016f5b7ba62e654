"""OpenCode's session binding: rules the 2026-12-06 (fourth) mutation run found unpinned.

Each test states one rule of :mod:`connectcore.opencode_binding` through its public functions; its
docstring names the mutants it kills (docs/survivors/opencode_binding.md lists the ones left as
equivalent, with reasons).
"""

from __future__ import annotations

import pytest

from connectcore import opencode_binding as OC
from connectcore.effects import Audit

SES = "ses_dc312b8eeffeukCeBPJfXsuyap"
CWD = "/home/me/src/app"


def test_a_binding_s_audit_line_is_connectd_s_opencode_bind_on_the_pane_at_its_time() -> None:
    """Both audit lines, whole: actor ``connectd``, action ``opencode.bind``, the pane as target, the
    time given. Kills x_bind_audit 1, 2, 4, 6, 10, 12 (the refused line's actor, action, target, time)
    and 19 (the bound line's actor)."""
    assert OC.bind_audit("%3", OC.Refusal.NO_LISTENER, at=5.0) == Audit(
        "connectd", "opencode.bind", "refused", target="%3", detail="no_listener", at=5.0
    )
    assert OC.bind_audit("%3", SES, at=5.0) == Audit(
        "connectd", "opencode.bind", "bound", target="%3", detail=SES, at=5.0
    )


@pytest.mark.parametrize("port", [1, 65535])
def test_the_server_port_range_is_1_to_65535_inclusive(port: int) -> None:
    """Kills x_check_port 5, 6 (port 1 refused) and 7 (port 65535 refused)."""
    assert OC.check_port(port) == port
    assert OC.server_args(port)[0] == f"--port={port}"


@pytest.mark.parametrize("arg", ["--hostname=0.0.0.0=x", "--port=4242=1"])
def test_a_server_flag_is_named_by_what_precedes_its_first_equals_sign(arg: str) -> None:
    """An option's name ends at its first ``=``: a value that itself holds ``=`` does not hide the
    server flag (the launch would otherwise keep the user's address). Kills x_server_flag_in 7
    (``split`` -> ``rsplit``)."""
    assert OC.server_flag_in(("opencode", arg)) == arg.split("=", 1)[0]


def test_a_session_flag_s_value_is_the_argument_after_it() -> None:
    """``--session ID`` names ID (the argument after the flag), whatever precedes or follows it.
    Kills x_session_in_argv 17 (``options[i + 1]`` -> ``options[i - 1]``)."""
    argv = ("opencode", "--model", "anthropic/opus", "--session", SES, "--agent", "build")
    assert OC.session_in_argv(argv) == (True, SES)
    assert OC.plan(argv) == OC.BindPlan(OC.Step.KNOWN, session_id=SES)
    short = ("opencode", "--session", SES, "--agent", "build")
    assert OC.plan(short) == OC.BindPlan(OC.Step.KNOWN, session_id=SES)


@pytest.mark.parametrize("fork", ["--fork=true", "--fork=a=b"])
def test_a_fork_given_with_equals_still_forks_so_nothing_is_bound(fork: str) -> None:
    """``--fork=VALUE`` forks as ``--fork`` does: the named session is not the launch's, so the pane
    stays unbound. Kills x_session_in_argv 35 (split on whitespace), 39 (``rsplit``: ``--fork=a=b``)
    and 40 (split on ``XX=XX``)."""
    argv = ("opencode", f"--session={SES}", fork)
    assert OC.session_in_argv(argv) == (True, None)
    assert OC.plan(argv) == OC.BindPlan(OC.Step.UNBOUND, reason=OC.Refusal.SESSION_PICKED)


def test_a_malformed_resumed_session_is_unbound_as_a_bad_answer() -> None:
    """A resume naming no OpenCode session id is left unbound with its reason, ``bad_answer``. Kills
    x_plan 5, 7 (the reason dropped)."""
    assert OC.plan(("opencode",), resumed="not-a-session") == OC.BindPlan(
        OC.Step.UNBOUND, reason=OC.Refusal.BAD_ANSWER
    )


def test_a_listener_whose_sockets_are_exactly_the_tree_s_is_the_pane_s() -> None:
    """Every listener on the port in the pane's tree is enough: the tree need hold no other socket.
    Kills x_listener_refusal 8 (``<=`` -> ``<``: a tree with only that socket refused)."""
    assert OC.listener_refusal(4242, {4242: frozenset({7})}, frozenset({7})) is None
    assert OC.listener_refusal(4242, {4242: frozenset({7, 8})}, frozenset({7, 8})) is None


def test_a_300_answer_binds_nothing() -> None:
    """Only a 2xx answer counts: 299 does, 300 (a redirect) does not, for the creation and for the
    selection. Kills x_created_session 4, 5 and x_selected 4, 5 (``< 300`` -> ``<= 300``, ``< 301``)."""
    good = {"id": SES, "parentID": None, "directory": CWD}
    assert OC.created_session(299, good, directory=CWD) == SES
    assert OC.created_session(300, good, directory=CWD) is OC.Refusal.SERVER_REFUSED
    assert OC.selected(299, True) is None
    assert OC.selected(300, True) is OC.Refusal.SERVER_REFUSED
