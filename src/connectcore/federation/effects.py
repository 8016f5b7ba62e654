"""Federation's effects on the bus: what the outbox and the inbox ask the shell to publish and
acknowledge, as plain data (docs/federation.md, "Events and effects").

- :class:`PublishEnvelope`: publish one attempt of an outbox row's message or cancel. The shell seals
  the row's stored inner part with its stored nonce (so every copy of one row is the same bytes) and
  publishes it with ``Nats-Msg-Id`` ``<SHA-256 of the wire, first 16 bytes hex>-<attempt>``.
- :class:`PublishReceipt`: publish a receipt the inbox committed: its inner part and nonce are given
  whole, so a receipt answered again (a duplicate) is the same bytes.
- :class:`AckDelivery`: acknowledge one JetStream delivery, after what its step committed.

The order inside a step is the durability rule: a step's ``Persist`` records are durable before its
``PublishReceipt`` runs, and that runs before its ``AckDelivery``.

These are not yet :class:`connectcore.effects.Effect` subclasses: the interpreter (``connectd``) has a
handler for every ``Effect`` the core defines and architecture.md lists each, and nothing executes these
until the daemon wiring (``hub/federation.py``, slice 5's rest) is built. That slice re-bases them on
``Effect``, gives each its handler and lists them; until then :data:`Effects` names what a step returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from connectcore.effects import Effect
from connectcore.federation.envelope import Identity, Kind, ReceiptInner


@dataclass(frozen=True)
class BusEffect:
    """Base of the federation's bus effects (see the module's note on :class:`Effect`)."""


@dataclass(frozen=True)
class PublishEnvelope(BusEffect):
    """Publish attempt ``attempt`` of the outbox row for ``identity``: its message (``kind`` message)
    or its cancel (``kind`` cancel), to box ``to`` in pairing ``pairing``."""

    kind: Kind
    to: str
    pairing: str
    identity: Identity
    attempt: int


@dataclass(frozen=True)
class PublishReceipt(BusEffect):
    """Seal ``inner`` with ``nonce`` to its ``routing.to`` box, sign and publish it."""

    inner: ReceiptInner
    nonce: bytes


@dataclass(frozen=True)
class AckDelivery(BusEffect):
    """Acknowledge the JetStream delivery the shell named ``delivery`` when it reported it."""

    delivery: str


AnyEffect = Effect | BusEffect
Effects = tuple[AnyEffect, ...]
