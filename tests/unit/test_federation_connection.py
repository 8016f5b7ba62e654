"""Which change of ``federation.toml`` a running daemon takes without a restart
(connectcore.federation.connection, rules C1-C6; the daemon's side: test_federate_cli)."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore.federation.connection import NATS_FIELDS, Change, reload_change, reload_refusal

OFF: dict[str, Any] = {
    "name": "laptop", "nats": None, "creds": None, "user": None, "password_file": None, "resend": 10.0,
    "tls_ca": None, "tls_cert": None, "tls_key": None,
}
ON = {**OFF, "nats": "nats://hub:4222", "creds": "/k/box.creds"}


def test_the_nats_fields_are_how_a_box_reaches_nats_and_nothing_else() -> None:
    assert set(NATS_FIELDS) == {"nats", "creds", "user", "password_file", "tls_ca", "tls_cert", "tls_key"}


def test_a_daemon_with_no_bus_takes_a_file_that_now_names_a_server() -> None:
    """C6: the one change taken, with every NATS field changing at once."""
    read = {**OFF, **{k: f"x-{k}" for k in NATS_FIELDS}, "nats": "tls://hub:4222"}
    assert reload_refusal(OFF, read, bus_running=False) is None


def test_nothing_changed_is_answered_as_such_needing_no_restart() -> None:
    assert reload_refusal(ON, dict(ON), bus_running=True) == ("nothing changed", False)
    assert reload_refusal(OFF, dict(OFF), bus_running=False) == ("nothing changed", False)


def test_a_file_gone_needs_a_restart() -> None:
    assert reload_refusal(OFF, None, bus_running=False) == ("federation.toml is gone", True)


@pytest.mark.parametrize("change", [{"name": "desk"}, {"resend": 5.0}])
@pytest.mark.parametrize("bus_running", [False, True])
def test_anything_but_how_the_box_reaches_nats_needs_a_restart(change: dict[str, Any], bus_running: bool) -> None:
    """C3, before C4 and C5: another name or resend, even with the server changing too."""
    read = {**OFF, "nats": "nats://hub:4222", **change}
    assert reload_refusal(OFF, read, bus_running=bus_running) == (
        "more than how this box reaches NATS changed (its name, resend): a restart reads it", True)


def test_running_bus_loops_are_moved_to_another_server_or_stopped_without_a_restart() -> None:
    """C4: another server, other credentials, or off, while the loops run: taken."""
    for read in ({**ON, "nats": "nats://other:4222"}, {**ON, "user": "bob"}, OFF):
        assert reload_refusal(ON, read, bus_running=True) is None
    assert reload_change({**ON, "nats": "nats://other:4222"}, bus_running=True) is Change.MOVE
    assert reload_change({**ON, "user": "bob"}, bus_running=True) is Change.MOVE
    assert reload_change(OFF, bus_running=True) is Change.STOP


def test_a_daemon_with_no_bus_starts_one() -> None:
    """C6: the change taken by a daemon whose loops never ran is a start."""
    assert reload_change(ON, bus_running=False) is Change.START


def test_a_file_naming_no_server_starts_no_bus_and_needs_no_restart() -> None:
    """C5: a daemon with no bus, its credentials changing but still no server."""
    assert reload_refusal(OFF, {**OFF, "creds": "/k/box.creds"}, bus_running=False) == (
        "no NATS server named: no bus to start", False)
