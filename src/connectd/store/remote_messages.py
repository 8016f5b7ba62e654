"""Federation's message records: the sending box's outbox rows and the receiving box's inbox records
(:mod:`connectcore.federation.outbox`, :mod:`connectcore.federation.inbox`; docs/federation.md,
"Sending and receiving: the states").

Written from the core's ``Persist`` effects (kinds ``outbox`` and ``inbox``, keyed by the message's
identity) by :meth:`connectd.store.store.Store.apply`, so in the same transaction as the other records
of the step: an inbox record commits with the local message row and its card, or not at all (the
receiving box commits the text and the message's identity in one transaction before it says so). Read
back whole (:meth:`RemoteMessageRecords.outbox_rows`, :meth:`RemoteMessageRecords.inbox_records`) for
``outbox.Outbox`` and ``inbox.load`` after a restart, and the outbox listed for the person
(:meth:`RemoteMessageRecords.outbox_listing`, beside the messages in ``connectd messages``).

Rules:

- One row per identity (sender box, sender principal, message id): the primary key. A later ``Persist``
  of the same identity updates its row; the database refuses one that would change the digest the
  identity was first stored with (a copy of a message is never another message).
- A ``Persist`` whose record is ``None`` deletes the row (the inbox's retention).
- A record of the wrong type, or whose key is not its identity, is refused and nothing of the step is
  written.
- An accepted inbox record writes, once, the **remote principal**'s row (``box:<box id>/<principal>``,
  harness ``remote``, no pane, no token, no grant) in the same transaction: the local message row, its
  card and a later pair approval name it as their sender, as a local one names its principal. The
  grant book never loads it (:meth:`connectd.store.store.Store.load_hub`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from connectcore.effects import Persist
from connectcore.federation import inbox as I
from connectcore.federation import outbox as O
from connectcore.federation import remote as R
from connectcore.federation.envelope import Identity
from connectcore.grants import Principal
from connectd.store import codec
from connectd.store.connection import Connection, StoreError, key_of, record_of

_IDENTITY = "box = ? AND principal = ? AND message_id = ?"
_LISTING_REF = "('outbox:' || principal || '/' || message_id)"  # listing_ref in SQL


def listing_ref(identity: Identity) -> str:
    """An outbox row's place among the listed messages, after its ``created_at``: what a local
    message's ``ref`` is in a message cursor (an outbox row has no local ref)."""
    return f"outbox:{identity.principal}/{identity.id}"
REMOTE_HARNESS = "remote"  # the harness column of a remote principal's row


def _identity(p: Persist) -> tuple[str, str, str]:
    (identity,) = key_of(p, 1)
    if not isinstance(identity, Identity):
        raise StoreError(f"{p.kind} key must be (Identity,), got {p.key!r}")
    return identity.box, identity.principal, identity.id


class RemoteMessageRecords(Connection):
    def _put_outbox(self, p: Persist) -> None:
        if p.record is None:
            self._delete("outbox", _IDENTITY, _identity(p))
            return
        r = record_of(p, O.Row, (getattr(p.record, "identity", None),))
        box, principal, message_id = _identity(p)
        self._db.execute(
            "INSERT INTO outbox (box, principal, message_id, to_box, pairing, digest, state, created_at, due, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (box, principal, message_id) DO UPDATE SET"
            " to_box = excluded.to_box, pairing = excluded.pairing, digest = excluded.digest,"
            " state = excluded.state, created_at = excluded.created_at, due = excluded.due, body = excluded.body",
            (box, principal, message_id, r.to, r.pairing, r.digest, r.state.value, r.created_at, r.due,
             codec.dumps(r)),
        )

    def _put_inbox(self, p: Persist) -> None:
        if p.record is None:
            self._delete("inbox", _IDENTITY, _identity(p))
            return
        r = record_of(p, I.Record, (getattr(p.record, "identity", None),))
        box, principal, message_id = _identity(p)
        self._db.execute(
            "INSERT INTO inbox (box, principal, message_id, pairing, digest, state, created_at, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (box, principal, message_id) DO UPDATE SET"
            " pairing = excluded.pairing, digest = excluded.digest, state = excluded.state,"
            " created_at = excluded.created_at, body = excluded.body",
            (box, principal, message_id, r.pairing, r.digest, r.state.value, r.created_at, codec.dumps(r)),
        )
        if r.message is not None:
            remote = Principal(R.remote_principal(box, principal), REMOTE_HARNESS, "", 0, "", r.created_at)
            self._db.execute(
                "INSERT INTO principals (id, harness, pane_id, pid, incarnation, control, created_at, body)"
                " VALUES (?, ?, '', 0, '', 0, ?, ?) ON CONFLICT (id) DO NOTHING",
                (remote.id, REMOTE_HARNESS, remote.created_at, codec.dumps(remote)),
            )

    def outbox_rows(self) -> list[O.Row]:
        """Every outbox row, oldest first (``outbox.Outbox(own, {r.identity: r for r in rows})``)."""
        return [codec.loads(O.Row, b) for (b,) in self._rows(
            "SELECT body FROM outbox ORDER BY created_at, box, principal, message_id")]

    def outbox_listing(
        self, *, principal: str | Collection[str] | None = None, pane: str | None = None, limit: int = 200,
        before: tuple[float, str] | None = None, after: tuple[float, str] | None = None, newest_first: bool = True,
    ) -> list[O.Row]:
        """Outbox rows as :meth:`connectd.store.messages.MessageRecords.messages` lists messages, with the
        same filters and cursors (``principal``: the sender, one id or a merge group; ``pane``: sent
        from it), ordered by (created_at, :func:`listing_ref`)."""
        where: list[str] = []
        args: list[Any] = []
        if before is not None:
            where.append(f"(created_at, {_LISTING_REF}) < (?, ?)")
            args += [before[0], before[1]]
        if after is not None:
            where.append(f"(created_at, {_LISTING_REF}) > (?, ?)")
            args += [after[0], after[1]]
        if principal is not None:
            ids = (principal,) if isinstance(principal, str) else tuple(principal)
            where.append(f"principal IN ({', '.join('?' for _ in ids)})")
            args += ids
        if pane is not None:
            where.append("principal IN (SELECT id FROM principals WHERE pane_id = ?)")
            args.append(pane)
        direction = "DESC" if newest_first else "ASC"
        sql = ("SELECT body FROM outbox" + (f" WHERE {' AND '.join(where)}" if where else "")
               + f" ORDER BY created_at {direction}, {_LISTING_REF} {direction} LIMIT ?")
        return [codec.loads(O.Row, b) for (b,) in self._rows(sql, (*args, max(0, limit)))]

    def inbox_records(self) -> list[I.Record]:
        """Every inbox record, oldest first (``inbox.load(own, records, removed=...)``)."""
        return [codec.loads(I.Record, b) for (b,) in self._rows(
            "SELECT body FROM inbox ORDER BY created_at, box, principal, message_id")]
