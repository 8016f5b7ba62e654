"""How this box reaches NATS (``federation.toml``'s connection settings, read by
:mod:`connectd.federation.settings`), and which change of them a running daemon takes without a restart.

Rules (:func:`reload_refusal`; the settings come in as plain values, field name -> value):

C1  **Nothing changed** is answered as such (no restart needed, nothing done).
C2  **The file gone** (``federate`` removed it) needs a restart.
C3  **Only how this box reaches NATS may change** (:data:`NATS_FIELDS`): another name or ``resend``
    needs a restart, which reads it.
C4  **Running bus loops are not moved**: a daemon whose bus loops run (``bus_running``) needs a restart
    to reach another server or to turn federation off (stopping the running loops is not safe yet:
    docs/federation.md, build order 4).
C5  **No server, no bus**: a file naming no NATS server starts nothing (no restart needed either).
C6  Otherwise the change is taken: a daemon whose bus loops never started starts them, as a start would.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The settings of how this box reaches NATS (what ``federate --nats``/``--off`` write).
NATS_FIELDS = ("nats", "creds", "user", "password_file", "tls_ca", "tls_cert", "tls_key")


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
    if bus_running:
        return (f"the running daemon's bus uses {current.get('nats')}: "
                + ("moving it to another server" if read.get("nats") else "turning federation off")
                + " needs a restart"), True
    if not read.get("nats"):
        return "no NATS server named: no bus to start", False
    return None
