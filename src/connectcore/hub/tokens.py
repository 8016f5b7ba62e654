"""An agent joining: ``Launch`` issues its token (one control at a time,
:func:`connectcore.hub.acts.check_launch`) and ``BindSession`` joins it to its session.
"""

from __future__ import annotations

from dataclasses import replace

from connectcore import grants
from connectcore.hub import acts as hub_acts
from connectcore.hub.state import BindSession, Hub, Launch, Step, UnknownItem


def _launch(hub: Hub, ev: Launch) -> Step:
    hub_acts.check_launch(hub.book, control=ev.control, session=ev.session)  # one control at a time
    book, _principal, effects = grants.issue_token(
        hub.book,
        now=ev.now,
        token_hash=ev.token_hash,
        principal_id=ev.principal_id,
        harness=ev.harness,
        pane_id=ev.pane_id,
        pid=ev.pid,
        incarnation=ev.incarnation,
        scopes=ev.scopes,
        session=ev.session,
        control=ev.control,
        in_place=ev.in_place,
    )
    return replace(hub, book=book), effects


def _bind(hub: Hub, ev: BindSession) -> Step:
    if ev.principal_id not in hub.book.principals:
        raise UnknownItem("unknown_principal", f"no principal {ev.principal_id}")
    book, effects = grants.bind_session(
        hub.book, now=ev.now, principal_id=ev.principal_id, session=ev.session
    )
    return replace(hub, book=book), effects
