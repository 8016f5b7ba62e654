"""The pairing records in SQLite: invitations, pair requests and pairings (with their pinned keys) of
``connectcore.federation.pairing``, and the pairing envelopes this box owes the bus.

A part of :class:`connectd.store.store.Store` like the others: the same connection, lock and
transactions (:class:`connectd.store.connection.Connection`), in the tables the store's migration 5
makes (``pair_invitations``, ``pair_requests``, ``pairings``, ``pair_wires``). A data
directory whose pairing tables an older connectd made on a connection of its own, with their own version
table (``pair_schema``), keeps them: migration 5 finds them and drops only ``pair_schema``. A pairing's
settings (``connectd pair set``) are in its body, ``settings``; migration 7 gave every pairing stored
before them the defaults, and the database refuses a pairing body without them. A setting added later
(``directory``, ``history``, ``history_repos``) that a stored body does not hold reads as its default
(no migration: the body is rewritten with it at the pairing's next step).

Rules:

- :meth:`PairRecords.pair_book` gives the :class:`~connectcore.federation.pairing.PairBook` as stored.
- :meth:`PairRecords.apply_pairing` writes every pairing ``Persist`` and ``Audit`` of one step, and the wires
  that step owes the bus (:class:`Wire`), in one transaction, and returns once it is committed. A
  ``Persist`` of another kind, or a key that is not its record's, is refused (:class:`StoreError`) and
  nothing of the step is written.
- The database refuses what the tables forbid, whatever the caller: an invitation that left ``open``
  never changes state again (consumed at most once), a pairing once ``removed`` stays removed, and a
  pairing id names one pairing.
- A wire is kept until the bus took it: ``due`` until a publish was acknowledged (:meth:`sent`);
  a ``resend`` one (a pair_request, until its answer comes) is due again ``resend`` seconds later.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from connectcore.effects import Audit, Effect, Persist
from connectcore.federation import pairing as P
from connectcore.federation.boxes import BoxKeys
from connectcore.federation.remote import PairingSettings
from connectd.store.audit import AuditLog
from connectd.store.connection import StoreError


@dataclass(frozen=True)
class Wire:
    """A pairing envelope this box owes the bus: its subject and bytes (sealed and signed once, so
    every publish is the same bytes), when it is due (``None``: sent, nothing owed) and, for one that
    is published again until answered, every how many seconds."""

    key: str
    subject: str
    wire: bytes
    attempt: int = 0
    due_at: float | None = 0.0
    resend: float | None = None
    created_at: float = 0.0

    @classmethod
    def settled(cls, key: str) -> Wire:
        """Nothing more owed for ``key`` (a request whose answer came, a pairing that ended); a key
        never owed stays absent."""
        return cls(key, "", b"", due_at=None)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _keys(keys: BoxKeys) -> dict[str, str]:
    return {"sign": _b64(keys.sign), "seal": _b64(keys.seal)}


def _unkeys(row: dict[str, str]) -> BoxKeys:
    return BoxKeys(base64.urlsafe_b64decode(row["sign"]), base64.urlsafe_b64decode(row["seal"]))


def encode(record: P.Invitation | P.PairRequest | P.Pairing) -> str:
    """A record as the JSON its row's body holds (a pairing's settings as an object of their own)."""
    row: dict[str, Any] = {}
    for name in record.__dataclass_fields__:
        value = getattr(record, name)
        row[name] = (_keys(value) if isinstance(value, BoxKeys)
                     else dataclasses.asdict(value) if isinstance(value, PairingSettings) else value)
    return json.dumps(row, sort_keys=True, separators=(",", ":"))


def decode_invitation(body: str) -> P.Invitation:
    row = json.loads(body)
    return P.Invitation(**{**row, "state": P.InvitationState(row["state"])})


def decode_request(body: str) -> P.PairRequest:
    row = json.loads(body)
    return P.PairRequest(**{**row, "keys": _unkeys(row["keys"]), "state": P.RequestState(row["state"])})


def _settings(row: dict[str, Any]) -> PairingSettings:
    """A pairing's stored settings; a key stored before its setting existed takes its default."""
    return PairingSettings(**{**row, **({"history_repos": tuple(row["history_repos"])} if "history_repos" in row else {})})


def decode_pairing(body: str) -> P.Pairing:
    row = json.loads(body)
    return P.Pairing(**{
        **row, "keys": _unkeys(row["keys"]), "state": P.PairingState(row["state"]), "role": P.Role(row["role"]),
        "settings": _settings(row["settings"]),
    })


class PairRecords(AuditLog):
    """The pairing records, a part of the store (its connection, lock and transactions)."""

    # --- reads ----------------------------------------------------------------------------------

    def pair_book(self, own_box: str, own_name: str) -> P.PairBook:
        """Every invitation, request and pairing, as the book the pairing steps take."""
        with self._lock:
            invitations = [decode_invitation(b) for (b,) in self._db.execute("SELECT body FROM pair_invitations")]
            requests = [decode_request(b) for (b,) in self._db.execute("SELECT body FROM pair_requests")]
            pairings = [decode_pairing(b) for (b,) in self._db.execute("SELECT body FROM pairings")]
        return P.PairBook(
            own_box=own_box,
            own_name=own_name,
            invitations={i.id: i for i in invitations},
            requests={r.id: r for r in requests},
            pairings={p.invitation: p for p in pairings},
        )

    def wires(self) -> list[Wire]:
        """Every wire still owed (due, or to be sent again), oldest first."""
        rows = self._rows(
            "SELECT key, subject, wire, attempt, due_at, resend, created_at FROM pair_wires"
            " WHERE due_at IS NOT NULL ORDER BY created_at, key"
        )
        return [Wire(*row) for row in rows]

    def wire(self, key: str) -> Wire | None:
        rows = self._rows(
            "SELECT key, subject, wire, attempt, due_at, resend, created_at FROM pair_wires WHERE key = ?", (key,)
        )
        return Wire(*rows[0]) if rows else None

    # --- writes ---------------------------------------------------------------------------------

    def apply_pairing(self, effects: Iterable[Effect], wires: Iterable[Wire] = ()) -> None:
        """Every pairing Persist and Audit of one step, and the wires it owes, in one transaction;
        other effects are not the store's. Nothing is written if any of it is refused."""
        mine = [e for e in effects if isinstance(e, Persist | Audit)]
        owed = list(wires)
        if not mine and not owed:
            return
        with self._tx() as db:
            for effect in mine:
                if isinstance(effect, Audit):
                    self._put_audit(effect)
                else:
                    self._put_pairing(effect)
            for wire in owed:
                if not wire.wire:  # Wire.settled
                    db.execute("UPDATE pair_wires SET due_at = NULL, resend = NULL WHERE key = ?", (wire.key,))
                    continue
                db.execute(
                    "INSERT INTO pair_wires (key, subject, wire, attempt, due_at, resend, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET due_at = excluded.due_at,"
                    " resend = excluded.resend",
                    (wire.key, wire.subject, wire.wire, wire.attempt, wire.due_at, wire.resend, wire.created_at),
                )

    def _put_pairing(self, p: Persist) -> None:
        record, db = p.record, self._db
        if p.kind == P.STORE_INVITATION and isinstance(record, P.Invitation) and p.key == (record.id,):
            db.execute(
                "INSERT INTO pair_invitations (id, state, expires_at, body) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body",
                (record.id, record.state.value, record.expires_at, encode(record)),
            )
        elif p.kind == P.STORE_REQUEST and isinstance(record, P.PairRequest) and p.key == (record.id,):
            db.execute(
                "INSERT INTO pair_requests (id, invitation, box_id, state, body) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET state = excluded.state, body = excluded.body",
                (record.id, record.invitation, record.box_id, record.state.value, encode(record)),
            )
        elif p.kind == P.STORE_PAIRING and isinstance(record, P.Pairing) and p.key == (record.invitation,):
            db.execute(
                "INSERT INTO pairings (invitation, id, box_id, state, body) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (invitation) DO UPDATE SET id = excluded.id, state = excluded.state, body = excluded.body",
                (record.invitation, record.id, record.box_id, record.state.value, encode(record)),
            )
        else:
            raise StoreError(
                f"not a pairing record: Persist {p.kind!r} key {p.key!r} of a {type(record).__name__}; nothing written"
            )

    def sent(self, key: str, *, attempt: int, now: float) -> None:
        """The bus took ``key``'s wire (attempt ``attempt``): nothing more owed, or, for one published
        until answered, due again ``resend`` seconds from ``now``."""
        with self._tx() as db:
            db.execute(
                "UPDATE pair_wires SET attempt = ?, due_at = CASE WHEN resend IS NULL THEN NULL ELSE ? + resend END"
                " WHERE key = ?",
                (attempt, now, key),
            )

    def due_again(self, key: str, now: float) -> None:
        """Owe ``key``'s wire again now (a repeated request: the answer is published again)."""
        with self._tx() as db:
            db.execute("UPDATE pair_wires SET due_at = ? WHERE key = ?", (now, key))
