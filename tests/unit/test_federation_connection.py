"""Which change of ``federation.toml`` a running daemon takes without a restart
(connectcore.federation.connection, rules C1-C6; the daemon's side: test_federate_cli)."""

from __future__ import annotations

from typing import Any

import pytest

from connectcore.federation.connection import NATS_FIELDS, reload_refusal

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


def test_running_bus_loops_are_not_moved_or_stopped_without_a_restart() -> None:
    """C4: another server, or off, while the loops run."""
    assert reload_refusal(ON, {**ON, "nats": "nats://other:4222"}, bus_running=True) == (
        "the running daemon's bus uses nats://hub:4222: moving it to another server needs a restart", True)
    assert reload_refusal(ON, OFF, bus_running=True) == (
        "the running daemon's bus uses nats://hub:4222: turning federation off needs a restart", True)
    assert reload_refusal(ON, {**ON, "user": "bob"}, bus_running=True) == (
        "the running daemon's bus uses nats://hub:4222: moving it to another server needs a restart", True)


def test_a_file_naming_no_server_starts_no_bus_and_needs_no_restart() -> None:
    """C5: a daemon with no bus, its credentials changing but still no server."""
    assert reload_refusal(OFF, {**OFF, "creds": "/k/box.creds"}, bus_running=False) == (
        "no NATS server named: no bus to start", False)
