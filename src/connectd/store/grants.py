"""The grant book's records: principals, their tokens (as hashes only) and their grants.

Written from the core's ``Persist`` effects (kinds ``principal``, ``token``, ``grant``); read back
whole by :meth:`connectd.store.store.Store.load_hub`.
"""

from __future__ import annotations

import json

from connectcore.effects import Persist
from connectcore.grants import Principal, Scope, TokenRecord
from connectd.store import codec
from connectd.store.connection import Connection, StoreError, check_hash, key_of, record_of


class GrantRecords(Connection):
    def _put_principal(self, p: Persist) -> None:
        if p.record is None:
            self._delete("principals", "id = ?", key_of(p, 1))
            return
        r = record_of(p, Principal, (getattr(p.record, "id", None),))
        session = r.session or (None, None)
        self._upsert(
            "principals",
            id=r.id, harness=r.harness, pane_id=r.pane_id, pid=r.pid, incarnation=r.incarnation,
            session_harness=session[0], session_id=session[1], control=int(r.control),
            merged_into=r.merged_into, created_at=r.created_at, body=codec.dumps(r),
        )
        if r.session is not None or r.merged_into is not None:
            # grants.bind_session drops the pre-binding grant from the book without a Persist for it:
            # mirror that here, so a reloaded book equals the live one.
            self._delete("grants", "grant_key = ?", (json.dumps(["principal", r.id]),))

    def _put_token(self, p: Persist) -> None:
        if p.record is None:
            self._delete("tokens", "token_hash = ?", key_of(p, 1))
            return
        r = record_of(p, TokenRecord, (getattr(p.record, "token_hash", None),))
        check_hash(r.token_hash, "token")
        self._upsert(
            "tokens",
            token_hash=r.token_hash, principal=r.principal, incarnation=r.incarnation, pane_id=r.pane_id,
            pid=r.pid, state=r.state.value, issued_at=r.issued_at, body=codec.dumps(r),
        )

    def _put_grant(self, p: Persist) -> None:
        key = p.key
        shape_ok = (len(key) == 3 and key[0] == "session") or (len(key) == 2 and key[0] == "principal")
        if not shape_ok or not all(isinstance(part, str) and part for part in key):
            raise StoreError(
                f"grant key must be ('session', harness, session id) or ('principal', id), got {key!r}"
            )
        grant_key = json.dumps(list(key))
        if p.record is None:
            self._delete("grants", "grant_key = ?", (grant_key,))
            return
        if not isinstance(p.record, frozenset) or not all(isinstance(s, Scope) for s in p.record):
            raise StoreError(f"grant {key!r}: record must be a frozenset of Scope, got {p.record!r}")
        self._upsert(
            "grants",
            grant_key=grant_key, kind=key[0],
            harness=key[1] if key[0] == "session" else None,
            session_id=key[2] if key[0] == "session" else None,
            principal=key[1] if key[0] == "principal" else None,
            scopes=",".join(sorted(s.value for s in p.record)), body=codec.dumps(p.record),
        )
