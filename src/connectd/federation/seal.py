"""Seal then sign an envelope, verify and open a wire, and report the facts: the only module that
imports ``nacl`` (PyNaCl: libsodium's ``crypto_box`` and Ed25519, used as they come).

Sealing: ``crypto_box`` (X25519, XSalsa20-Poly1305) of the canonical inner part with the nonce the
caller stored, from this box's X25519 secret to the receiving box's X25519 public key; then the outer
part (``connectcore.federation.envelope``) is signed with this box's Ed25519 key and the wire is
``signature || outer``. Both steps are deterministic for a given inner part and nonce, so every publish
of one stored row is the same bytes (docs/federation.md, "On the wire").

Receiving: the keys come from the core (``envelope.keys_to_verify``: those pinned for the subject's
sender, or a pair_request's own); the signature is verified before any byte of the outer part is
parsed, and the seal is opened only after it verified. What was seen is reported as
``envelope.Facts`` and judged by ``envelope.judge``: nothing here decides.
"""

from __future__ import annotations

from dataclasses import dataclass

import nacl.exceptions
import nacl.public
import nacl.signing

from connectcore.federation import envelope as E
from connectcore.federation.boxes import BoxKeys
from connectd.federation.keys import BoxSecrets


@dataclass(frozen=True, repr=False)
class LocalBox:
    """This box's keys as PyNaCl objects, made from the secrets in ``box.key``."""

    signing: nacl.signing.SigningKey
    sealing: nacl.public.PrivateKey

    @classmethod
    def from_secrets(cls, secrets: BoxSecrets) -> LocalBox:
        return cls(nacl.signing.SigningKey(secrets.sign_seed), nacl.public.PrivateKey(secrets.seal_secret))

    def __repr__(self) -> str:
        return f"LocalBox({self.box_id})"

    @property
    def keys(self) -> BoxKeys:
        """The public keys, as peers pin them."""
        return BoxKeys(bytes(self.signing.verify_key), bytes(self.sealing.public_key))

    @property
    def box_id(self) -> str:
        return self.keys.box_id


def seal(local: LocalBox, to: BoxKeys, inner: E.Inner, nonce: bytes) -> bytes:
    """The wire for ``inner`` sealed to ``to`` with ``nonce`` and signed by ``local``: the same bytes
    every time for the same inner part and nonce."""
    return seal_encoded(local, to, inner.routing, E.encode_inner(inner), nonce)


def seal_encoded(local: LocalBox, to: BoxKeys, routing: E.Routing, plain: bytes, nonce: bytes) -> bytes:
    """:func:`seal` of an inner part already encoded (an outbox row stores its canonical bytes), under
    ``routing``, which must be the one those bytes repeat (the receiver refuses it ``bad_binding``)."""
    if to.box_id != routing.to or local.box_id != routing.sender:
        raise ValueError("seal: the inner routing names other boxes than the keys given")
    box = nacl.public.Box(local.sealing, nacl.public.PublicKey(to.seal))
    sealed = box.encrypt(plain, nonce).ciphertext
    carried = local.keys if routing.kind is E.Kind.PAIR_REQUEST else None
    outer = E.Outer(routing, nonce, sealed, carried).encode()
    return local.signing.sign(outer).signature + outer


def read_wire(local: LocalBox, subject: str, wire: bytes, view: E.View) -> E.Facts:
    """What the wire shows with the keys the core names: the signature checked first, the seal
    opened only if it verified. Never raises for a bad wire: it reports it."""
    signature, outer = wire[: E.SIGNATURE_BYTES], wire[E.SIGNATURE_BYTES :]
    keys = E.keys_to_verify(subject, len(wire), outer, view)
    if keys is None:
        return E.Facts(subject, len(wire), None, outer, None)
    try:
        nacl.signing.VerifyKey(keys.sign).verify(outer, signature)
    except nacl.exceptions.BadSignatureError:
        return E.Facts(subject, len(wire), False, outer, None)
    opened: bytes | None = None
    try:
        parsed = E.parse_outer(outer)
    except E.EnvelopeError:
        parsed = None  # the judgement says `malformed`
    if parsed is not None:
        box = nacl.public.Box(local.sealing, nacl.public.PublicKey(keys.seal))
        try:
            opened = box.decrypt(parsed.sealed, parsed.nonce)
        except nacl.exceptions.CryptoError:
            opened = None  # the judgement says `bad_seal`
    return E.Facts(subject, len(wire), True, outer, opened)


def receive(local: LocalBox, subject: str, wire: bytes, view: E.View) -> E.Verdict:
    """The core's verdict on a wire received on ``subject``."""
    return E.judge(read_wire(local, subject, wire, view), view)
