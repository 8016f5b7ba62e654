"""Federation's effects on the bus: what the outbox and the inbox ask the shell to publish and
acknowledge, as plain data (docs/federation.md, "Events and effects"). Each is a
:class:`connectcore.effects.Effect` with its handler in the interpreter, which hands it to the daemon's
bus loop (``connectd.federation.pump``; a box that does not federate never has one).

- :class:`PublishEnvelope`: publish one attempt of an outbox row's message or cancel. The shell seals
  the row's stored inner part with its stored nonce (so every copy of one row is the same bytes) and
  publishes it with ``Nats-Msg-Id`` ``<SHA-256 of the wire, first 16 bytes hex>-<attempt>``.
- :class:`PublishReceipt`: publish a receipt the inbox committed: its inner part and nonce are given
  whole, so a receipt answered again (a duplicate) is the same bytes.
- :class:`AckDelivery`: acknowledge one JetStream delivery, after what its step committed.

The order inside a step is the durability rule: a step's ``Persist`` records are durable before its
``PublishReceipt`` runs, and that runs before its ``AckDelivery`` (the runner commits a step's records
before the interpreter runs any of its effects, in order; the bus loop keeps that order).
"""

from __future__ import annotations

from dataclasses import dataclass

from connectcore.effects import Effect
from connectcore.federation.envelope import Identity, Kind, ReceiptInner


@dataclass(frozen=True)
class PublishEnvelope(Effect):
    """Publish attempt ``attempt`` of the outbox row for ``identity``: its message (``kind`` message)
    or its cancel (``kind`` cancel), to box ``to`` in pairing ``pairing``."""

    kind: Kind
    to: str
    pairing: str
    identity: Identity
    attempt: int


@dataclass(frozen=True)
class PublishReceipt(Effect):
    """Seal ``inner`` with ``nonce`` to its ``routing.to`` box, sign and publish it."""

    inner: ReceiptInner
    nonce: bytes


@dataclass(frozen=True)
class AckDelivery(Effect):
    """Acknowledge the JetStream delivery the shell named ``delivery`` when it reported it."""

    delivery: str


BusEffect = PublishEnvelope | PublishReceipt | AckDelivery
Effects = tuple[Effect, ...]
