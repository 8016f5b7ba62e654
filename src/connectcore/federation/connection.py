"""How this box reaches NATS (``federation.toml``'s connection settings, read by
:mod:`connectd.federation.settings`), and which change of them a running daemon takes without a restart.

Rules (:func:`reload_refusal`, then :func:`reload_change`; the settings come in as plain values, field
name -> value):

C1  **Nothing changed** is answered as such (no restart needed, nothing done).
C2  **The file gone** (``federate`` removed it) needs a restart.
C3  **Only how this box reaches NATS may change** (:data:`NATS_FIELDS`): another name or ``resend``
    needs a restart, which reads it.
C4  **Running bus loops are moved or stopped**: a daemon whose bus loops run (``bus_running``) takes
    another server or other credentials (:attr:`Change.MOVE`: its loops stopped between deliveries,
    the old connection closed, new loops on the new one) and a file naming no server
    (:attr:`Change.STOP`, ``federate --off``: its loops stopped, it serves its own fleet with no NATS).
C5  **No server, no bus**: a daemon with no bus and a file naming no NATS server starts nothing (no
    restart needed either).
C6  Otherwise the change is taken: a daemon whose bus loops never started starts them
    (:attr:`Change.START`), as a start would.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

#: The settings of how this box reaches NATS (what ``federate --nats``/``--off`` write).
NATS_FIELDS = ("nats", "creds", "user", "password_file", "tls_ca", "tls_cert", "tls_key")


class Change(StrEnum):
    """What a running daemon does with a change it takes (C4, C6)."""

    START = "start"  # no bus ran: its loops start on the named server
    MOVE = "move"  # the running loops stop and start again on the named server (or with other credentials)
    STOP = "stop"  # the running loops stop: no NATS at all


def reload_refusal(
    current: Mapping[str, object], read: Mapping[str, object] | None, *, bus_running: bool
) -> tuple[str, bool] | None:
    """Why a running daemon does not take ``read`` (the file read again, None: it is gone) in place of
    ``current``, and whether a restart is needed then; None when it takes it (C1-C6)."""
    if read == current:
        return "nothing changed", False
    if read is None:
        return "federation.toml is gone", True
    if {k: v for k, v in read.items() if k not in NATS_FIELDS} != {
        k: v for k, v in current.items() if k not in NATS_FIELDS
    }:
        return "more than how this box reaches NATS changed (its name, resend): a restart reads it", True
    if not bus_running and not read.get("nats"):
        return "no NATS server named: no bus to start", False
    return None


def reload_change(read: Mapping[str, object], *, bus_running: bool) -> Change:
    """What the daemon does with ``read``, a change :func:`reload_refusal` let through (C4, C6)."""
    if not bus_running:
        return Change.START
    return Change.MOVE if read.get("nats") else Change.STOP
