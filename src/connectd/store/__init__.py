"""The store: the daemon's one SQLite file and the JSON text of the core's records in it.

- :mod:`connectd.store.store`: ``connect.db`` (WAL, fsynced transactions): each step's ``Persist`` and
  ``Audit`` effects written all or nothing before any later effect runs, tokens only as hashes.
- :mod:`connectd.store.codec`: the JSON codec for the core's frozen dataclasses (pydantic, driven by
  their type hints), the store's format.
"""
