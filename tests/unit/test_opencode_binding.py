"""OpenCode's launch-to-session binding rules (connectcore.opencode_binding) and its injection."""

from __future__ import annotations

import pytest

from connectcore import opencode_binding as OC
from connectcore.launchers import (
    Launcher,
    LauncherError,
    LaunchPlan,
    _connected_plan,
    harness_injection,
    inject,
    opencode_config_content,
    plain_plan,
    resume_plan,
    server_port_wanted,
)

URL = "http://127.0.0.1:7878/mcp"
SES = "ses_dc312b8eeffeukCeBPJfXsuyap"
CWD = "/home/me/src/app"


# --- the injection -------------------------------------------------------------------------------


def test_server_args_serve_on_loopback_only_in_the_equals_form() -> None:
    assert OC.server_args(4242) == ("--port=4242", "--hostname=127.0.0.1", "--mdns=false")


@pytest.mark.parametrize("port", [0, -1, 65536, "4242", 42.0, True, None])
def test_a_bad_port_is_refused(port: object) -> None:
    with pytest.raises(ValueError, match="1..65535"):
        OC.server_args(port)  # type: ignore[arg-type]
    if port is not None:
        with pytest.raises(LauncherError) as err:
            harness_injection("opencode", endpoint_url=URL, server_port=port)  # type: ignore[arg-type]
        assert err.value.reason == "bad_port"


def test_injection_with_a_port_adds_the_server_args_and_keeps_the_token_out_of_argv() -> None:
    inj = harness_injection("opencode", endpoint_url=URL, server_port=4242)
    assert inj.argv == OC.server_args(4242)
    assert inj.env == {"OPENCODE_CONFIG_CONTENT": opencode_config_content(URL)}
    assert "{env:CONNECT_TOKEN}" in inj.env["OPENCODE_CONFIG_CONTENT"]
    assert OC.PASSWORD_ENV not in inj.env  # the password is a secret: the daemon sets it, like the token


def _connected(argv: tuple[str, ...], env: dict[str, str] | None = None, port: int = 4242) -> LaunchPlan:
    launcher = Launcher("o", "opencode", argv=argv, env=env or {})
    return _connected_plan(launcher, argv, endpoint_url=URL, token_env="CONNECT_TOKEN", session_id=None,
                           extra_env={}, server_port=port)


def test_a_connected_plan_puts_the_server_args_after_the_program() -> None:
    plan = _connected(("opencode", "--model", "anthropic/x", "proj"))
    assert plan.argv == ("opencode", *OC.server_args(4242), "--model", "anthropic/x", "proj")


@pytest.mark.parametrize("arg", ["--port", "--port=9", "--hostname=0.0.0.0", "--mdns", "--no-mdns",
                                 "--mdns-domain=x", "--mini"])
def test_an_argv_that_sets_the_server_or_mini_is_refused(arg: str) -> None:
    with pytest.raises(LauncherError) as err:
        _connected(("opencode", arg, "9"))
    assert err.value.reason == "server_flag" and arg.split("=")[0] in str(err.value)


def test_server_flags_after_a_double_dash_are_the_users_own() -> None:
    assert OC.server_flag_in(("opencode", "--", "--port")) is None


def test_the_launcher_may_not_set_the_server_password() -> None:
    with pytest.raises(LauncherError) as err:
        _connected(("opencode",), env={OC.PASSWORD_ENV: "x"})
    assert err.value.reason == "bad_env" and OC.PASSWORD_ENV in str(err.value)


# --- what to bind by -----------------------------------------------------------------------------


def test_a_new_launch_creates_and_selects_its_session() -> None:
    assert OC.plan(("opencode", "--model", "m")) == OC.BindPlan(OC.Step.CREATE_AND_SELECT)


@pytest.mark.parametrize("argv", [("opencode", "--session", SES), ("opencode", f"--session={SES}"),
                                  ("opencode", "-s", SES), ("opencode", "-s", SES, "--session", SES)])
def test_an_argv_naming_one_session_is_bound_from_the_launch(argv: tuple[str, ...]) -> None:
    assert OC.plan(argv) == OC.BindPlan(OC.Step.KNOWN, session_id=SES)


@pytest.mark.parametrize("argv", [("opencode", "--continue"), ("opencode", "-c"),
                                  ("opencode", "--session", SES, "--fork"), ("opencode", "--session"),
                                  ("opencode", "--session", "not an id"),
                                  ("opencode", "-s", SES, "-s", "ses_other")])
def test_an_argv_picking_a_session_without_one_exact_id_stays_unbound(argv: tuple[str, ...]) -> None:
    assert OC.plan(argv) == OC.BindPlan(OC.Step.UNBOUND, reason=OC.Refusal.SESSION_PICKED)


def test_a_resume_is_bound_from_the_launch_and_a_malformed_one_is_not() -> None:
    assert OC.plan(("opencode", "--session", SES), resumed=SES) == OC.BindPlan(OC.Step.KNOWN, session_id=SES)
    assert OC.plan(("opencode",), resumed="../x").step is OC.Step.UNBOUND


# --- the process's own server --------------------------------------------------------------------


def test_the_listener_must_be_the_panes_own() -> None:
    assert OC.listener_refusal(4242, {4242: frozenset({7})}, frozenset({7, 8})) is None
    assert OC.listener_refusal(4242, {}, frozenset({7})) is OC.Refusal.NO_LISTENER
    assert OC.listener_refusal(4242, {4242: frozenset({9})}, frozenset({7})) is OC.Refusal.FOREIGN_LISTENER
    # one of two listeners (tcp and tcp6) outside the tree is foreign
    assert OC.listener_refusal(4242, {4242: frozenset({7, 9})}, frozenset({7})) is OC.Refusal.FOREIGN_LISTENER


def test_only_one_well_formed_root_session_in_the_launch_cwd_binds() -> None:
    good = {"id": SES, "directory": CWD, "slug": "x", "title": "New session"}
    assert OC.created_session(200, good, directory=CWD) == SES
    assert OC.created_session(401, good, directory=CWD) is OC.Refusal.SERVER_REFUSED
    for bad in ([good], {**good, "id": "ses_bad id"}, {**good, "parentID": "ses_p"}, {**good, "directory": "/x"},
                {"directory": CWD}, None, "ses_x"):
        assert OC.created_session(200, bad, directory=CWD) is OC.Refusal.BAD_ANSWER


def test_selection_binds_only_on_true() -> None:
    assert OC.selected(200, True) is None
    assert OC.selected(200, False) is OC.Refusal.BAD_ANSWER
    assert OC.selected(200, "true") is OC.Refusal.BAD_ANSWER
    assert OC.selected(401, True) is OC.Refusal.SERVER_REFUSED


# --- the launch: which launches serve, and the port the daemon picked ------------------------------

OPENCODE = Launcher("opencode", "opencode", argv=("opencode",), exit_command="/exit",
                    resume_argv=("opencode", "--session", "{session_id}"))


def test_a_new_opencode_launch_wants_a_port_and_a_resume_or_a_named_session_does_not() -> None:
    assert server_port_wanted(OPENCODE)
    assert not server_port_wanted(OPENCODE, session=SES)
    for argv in (("opencode", "--session", SES), ("opencode", "--continue"), ("opencode", "--port=9")):
        assert not server_port_wanted(Launcher("o", "opencode", argv=argv))
    assert not server_port_wanted(Launcher("c", "claude", argv=("claude",)))
    assert not server_port_wanted(Launcher("x", "opencode", opaque="opencode"))


def test_a_connected_new_launch_needs_the_port_and_a_port_where_none_is_wanted_is_refused() -> None:
    with pytest.raises(LauncherError) as err:
        inject(OPENCODE, endpoint_url=URL)
    assert err.value.reason == "bad_port" and "port" in str(err.value)
    with pytest.raises(LauncherError) as err:
        inject(Launcher("o", "opencode", argv=("opencode", "--continue")), endpoint_url=URL, server_port=4242)
    assert err.value.reason == "bad_port"
    with pytest.raises(LauncherError) as err:
        inject(OPENCODE, endpoint_url=URL, server_port=70000)
    assert err.value.reason == "bad_port"


def test_an_argv_naming_its_session_is_bound_from_the_launch_without_a_server() -> None:
    plan = inject(Launcher("o", "opencode", argv=("opencode", "--session", SES)), endpoint_url=URL)
    assert plan.connectable and plan.session_id == SES and plan.server_port is None and plan.password_env is None
    assert not any(a.startswith("--port") for a in plan.argv)


def test_restart_to_connect_resumes_the_session_without_a_server() -> None:
    plan = resume_plan(OPENCODE, SES, endpoint_url=URL)
    assert plan.argv == ("opencode", "--session", SES) and plan.session_id == SES
    assert plan.server_port is None and "OPENCODE_CONFIG_CONTENT" in plan.env_add


def test_an_off_launch_serves_too_so_it_can_be_restarted_to_connect_later() -> None:
    plan = plain_plan(OPENCODE, server_port=4242)
    assert plan.argv == ("opencode", *OC.server_args(4242)) and not plan.connectable
    assert plan.password_env == OC.PASSWORD_ENV and "OPENCODE_CONFIG_CONTENT" not in plan.env_add
    assert plain_plan(OPENCODE).argv == ("opencode",)
    with pytest.raises(LauncherError) as err:
        plain_plan(Launcher("o", "opencode", argv=("opencode",), env={OC.PASSWORD_ENV: "x"}), server_port=4242)
    assert err.value.reason == "bad_env"


# --- when the daemon binds, and what it records --------------------------------------------------


@pytest.mark.parametrize(
    ("harness", "idle", "bound", "started", "due"),
    [("opencode", True, False, False, True), ("opencode", False, False, False, False),
     ("unknown", True, False, False, False), ("opencode", True, True, False, False),
     ("opencode", True, False, True, False)],
)
def test_the_binding_runs_once_when_the_pane_reads_opencode_idle_and_unbound(
    harness: str, idle: bool, bound: bool, started: bool, due: bool
) -> None:
    assert OC.bind_due(harness=harness, idle=idle, bound=bound, started=started) is due


def test_every_refusal_has_words_and_the_audit_line_names_the_outcome() -> None:
    assert set(OC.REFUSAL_WORDS) == set(OC.Refusal)
    bound = OC.bind_audit("%3", SES, at=5.0)
    assert (bound.action, bound.outcome, bound.target, bound.detail, bound.at) == ("opencode.bind", "bound", "%3", SES, 5.0)
    refused = OC.bind_audit("%3", OC.Refusal.FOREIGN_LISTENER, at=5.0)
    assert (refused.outcome, refused.detail) == ("refused", "foreign_listener")
    with pytest.raises(ValueError, match="ses_"):
        OC.bind_audit("%3", "not-a-session", at=5.0)


def test_the_home_screen_is_told_from_a_shown_session() -> None:
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "screens" / "opencode" / "1.18.33"
    home = {p.name for p in folder.glob("*.txt") if OC.shows_home_screen(p.read_text())}
    assert home == {"01_idle_empty_80.txt", "01_idle_empty_160.txt"}  # every other screen shows a session


def test_an_opencode_launch_is_never_ready_for_a_message_while_it_binds() -> None:
    assert OC.ready_for_message(True, binding=False)
    assert not OC.ready_for_message(True, binding=True)
    assert not OC.ready_for_message(False, binding=False)


def _screen(name: str) -> str:
    from pathlib import Path

    return (Path(__file__).resolve().parents[1] / "fixtures" / "screens" / "opencode" / "1.18.33" / name).read_text()


def test_a_session_counts_as_shown_once_the_tui_left_its_home_screen_in_time_and_still_shows_it() -> None:
    """Claim (issue 24: was decided in connectd/agents/launch.py's capture loop): the daemon looks every
    ``SHOWN_LOOK_EVERY`` s; the TUI must leave its home screen within ``SHOWN_WAIT`` s and, after
    ``SHOWN_SETTLE`` s, still show the session; a capture that ends after the wait does not count."""
    home, session = _screen("01_idle_empty_80.txt"), _screen("02_draft_oneline_80.txt")
    again = OC.ShownLook(None, OC.SHOWN_LOOK_EVERY)
    assert OC.shown_look(home, elapsed=0.0, settling=False) == again
    assert OC.shown_look(session, elapsed=3.0, settling=False) == OC.ShownLook(None, OC.SHOWN_SETTLE, settling=True)
    assert OC.shown_look(session, elapsed=OC.SHOWN_WAIT, settling=False).settling  # at the wait's end: in time
    assert OC.shown_look(session, elapsed=OC.SHOWN_WAIT + 0.01, settling=False) == OC.ShownLook(False)  # too late
    assert OC.shown_look(home, elapsed=OC.SHOWN_WAIT - OC.SHOWN_LOOK_EVERY - 0.01, settling=False) == again
    assert OC.shown_look(home, elapsed=OC.SHOWN_WAIT - OC.SHOWN_LOOK_EVERY, settling=False) == OC.ShownLook(False)
    assert OC.shown_look(session, elapsed=99.0, settling=True) == OC.ShownLook(True)  # the settled look
    assert OC.shown_look(home, elapsed=8.0, settling=True) == OC.ShownLook(False)  # back home: lost
    assert (OC.SHOWN_WAIT, OC.SHOWN_SETTLE, OC.SHOWN_LOOK_EVERY) == (15.0, 5.0, 0.2)


def test_a_selected_session_binds_only_if_shown() -> None:
    """Claim (issue 24, R9): what counts as bound for an OpenCode launch."""
    assert OC.bind_result(SES, shown=True) == SES
    assert OC.bind_result(SES, shown=False) is OC.Refusal.NOT_SHOWN
    assert OC.bind_result(OC.Refusal.FOREIGN_LISTENER, shown=True) is OC.Refusal.FOREIGN_LISTENER
    assert OC.bind_result(OC.Refusal.NO_LISTENER, shown=False) is OC.Refusal.NO_LISTENER
