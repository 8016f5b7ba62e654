"""The store: the daemon's one SQLite file and the JSON text of the core's records in it.

- :mod:`connectd.store.store`: ``connect.db`` (WAL, fsynced transactions): each step's ``Persist`` and
  ``Audit`` effects written all or nothing before any later effect runs, tokens only as hashes.
- :mod:`connectd.store.connection`: the one connection, its lock and transactions, the checks every
  writer shares, and what a write can fail with (``StoreError``, ``StoreUnavailable``).
- one module per kind of record, each a part of ``Store``: :mod:`connectd.store.grants` (principals,
  tokens, grants), :mod:`connectd.store.messages`, :mod:`connectd.store.cards` (cards and pairs),
  :mod:`connectd.store.restarts`, :mod:`connectd.store.acts`, :mod:`connectd.store.audit` (and the
  export cursors), :mod:`connectd.store.owner`, :mod:`connectd.store.panes` (launches, bindings, releases),
  :mod:`connectd.store.pair_records` (federation's pairing records and the pairing envelopes owed),
  :mod:`connectd.store.remote_messages` (federation's outbox rows and inbox records).
- :mod:`connectd.store.codec`: the JSON codec for the core's frozen dataclasses (pydantic, driven by
  their type hints), the store's format.
"""
