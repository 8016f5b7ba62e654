"""Federation's rules: connect daemons on several machines (boxes) pairing and carrying agent text
across them, decided here and executed by ``connectd.federation`` (design: docs/federation.md).

What federation owns, one module each: box identity (``boxes``: box ids and fingerprints from public
keys, box names, targets qualified by a box and their ambiguity) and the envelope (``envelope``: its
outer and inner fields per kind, the canonical encoding, and the receiver's judgement of a wire from
the facts the shell reports) and pairing (``pairing``: invitations, pair requests and pairings, their
tables, atomic consumption, repeats and conflicts) and the message path's two ends (``outbox``: the
sending box's life of a message to another box, to one final outcome; ``inbox``: the receiving box's
records, deduplication and receipts; ``effects``: what they ask the shell to publish and acknowledge),
and how this box reaches NATS (``connection``: which change of ``federation.toml`` a running daemon
takes without a restart).
The recipient box's rules for a remote sender and the remote directory follow (docs/federation.md,
"Build order").

Like the rest of ``connectcore`` it is pure: it may use ``hashlib`` and ``base64``, never ``nacl`` or
``nats`` (import-linter). Keys never enter it: the core decides on facts the shell reports (the
signature verified, the seal opened), as it decides on screens the shell captured; public key bytes
enter only to derive box ids.
"""
