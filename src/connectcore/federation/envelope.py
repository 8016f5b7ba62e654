"""The envelope: its outer and inner fields per kind, their canonical encoding, and how a receiving
box judges a wire from the facts its shell reports.

Rules (docs/federation.md, "The envelope"):

- **On the wire**: ``wire = signature (64 bytes, Ed25519 over outer) || outer``. ``outer`` is canonical
  JSON (UTF-8, keys sorted, no whitespace, no NaN): ``v`` (1), ``kind``, ``from``, ``to``, the kind's
  routing (``pairing`` for a message, receipt, cancel, unpair, directory entry or history query or answer; ``invitation`` and the requester's
  public ``keys`` for a pair_request; ``invitation`` and the new ``pairing`` for a pair_accept;
  ``invitation`` for a pair_decline), ``nonce`` (24 bytes) and ``sealed`` (the inner part sealed with
  ``crypto_box`` to the receiving box), bytes as base64url without padding. Seal, then sign: the
  signature covers the exact bytes received.
- **Inner** (sealed; canonical JSON): the outer routing fields again (``v``, ``kind``, ``from``, ``to``
  and the kind's routing, never ``keys``), so a ciphertext moved under another outer is ``bad_binding``;
  then the kind's own fields (:data:`INNER_FIELDS`, and those of :data:`OPTIONAL_INNER_FIELDS` present
  only when set: a history query's ``session``, a directory entry's ``tombstone``). A message's **identity** is ``(sender box id,
  sender principal, message id)``; its **digest** is the SHA-256 of its canonical inner part, in hex.
- **Canonical** means byte for byte: a part is accepted only if encoding what was parsed gives the very
  bytes received (so duplicate keys, whitespace, escapes, padded base64 are all refused), and the same
  values always encode to the same bytes.
- **Subjects** are ``connect.<to>.<token>.<from>`` with the token per kind (:data:`SUBJECT_TOKEN`). A
  history query travels as a core NATS request on ``connect.<to>.history`` (no sender token: any box
  may ask), and its answer as the reply; both are judged under ``connect.<to>.history.<from>``, with
  ``from`` the box asked (an answer) or the outer part's own (a query: the signature with the keys
  pinned for that box is then what binds it).
- **The judgement** (:func:`judge`), in this order, the first that holds deciding: (1) ``malformed``:
  the subject is not one, the wire is longer than 64 KiB or too short to hold a signature; (2)
  ``wrong_box``: the subject's recipient is not this box; (3) ``unpaired``: no keys pinned for the
  subject's sender (on a pairing subject, a ``pair_request`` is checked with the keys it carries
  instead: not a pair_request is ``unpaired``, keys that do not give the sender's box id
  ``bad_binding``); (4) ``bad_signature``; (5) ``malformed``: the outer part is not canonical JSON of
  a known version and kind; (6) ``wrong_box``: the outer ``to`` is not this box; (7) ``bad_binding``:
  the outer ``from`` or ``kind`` differs from the subject (or a pair_request's keys from those
  pinned); (8) ``removed``: a message, receipt, cancel, directory entry or history query or answer whose ``pairing`` is not the active pairing
  with that box, an unpair naming no pairing with it (the pairing kinds' own lookups, invitations and
  requested pairings, are ``pairing.py``'s); (9) ``bad_seal``: the seal did not open; (10)
  ``bad_binding``: the inner part is not canonical JSON of its kind or its routing differs from the
  outer; (11) ``clock_ahead``: ``created_at`` (a receipt's, cancel's or pairing step's ``at``, a directory entry's ``published_at``, a history query's ``created_at``, an answer's ``at``) more
  than the skew bound after now; (12) ``stale``: a message's or cancel's ``created_at`` older than the
  retention; (13) ``conflict``: the identity is held with another digest. Then a receipt must answer a
  message this box sent with the same digest, and a cancel name a message its sender sent, else
  ``unknown_message``.
- **Each refusal changes nothing**: its verdict carries one audit note (``federation.envelope``,
  ``refused``, the reason, actor ``box:<the subject's sender token>``) and nothing to commit or publish.
  **A flood is audited once a minute** (:func:`refusal_audit_due`, used by every receiving loop: the
  envelopes of the fetch loop, directory entries, history queries): of the refusals of one box for one
  reason, the first is audited, then none until :data:`REFUSAL_AUDIT_EVERY` seconds after it; the
  others are logged and counted only (each still changes nothing), and the next record of that kind
  says how many were left out (:func:`refusal_count_words`).
- **What is not refused**: a **duplicate** (held with the same digest) is answered with the receipt
  held and commits nothing; **too late** (not held, ``created_at`` more than the id's hour ago, within
  the retention) commits the identity ``expired`` and answers it; **cancelled first** (held as a
  cancel's tombstone with the same digest) answers ``cancelled``; a cancel for a message not held
  commits a **tombstone** (identity, the digest it carries, ``cancelled``) and answers ``cancelled``;
  anything else is **new**, for the recipient box's rules (a message), the outbox (a receipt), the held
  message's cancellation (a cancel), the pairing rules (a pairing step) or the remote directory (an
  **entry**, :mod:`connectcore.federation.remote_directory`) or the history rules (a history query or
  answer, :mod:`connectcore.federation.remote_history`).
- **What nobody takes is audited ``ignored``**: a verdict the receiving desk has no one to hand to (a
  message, receipt, cancel, entry or history envelope at a desk joined to no engine: tests and tools
  that open the pairing desk alone) is one audit line (``federation.envelope``, ``ignored``, naming
  the decision; :meth:`Verdict.ignored`) and changes nothing.

Pure: no cryptography here. The shell verifies and opens with the keys :func:`keys_to_verify` names,
and reports the facts (:class:`Facts`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from connectcore._machine import ConnectError
from connectcore.delivery import DEFAULT_LIMITS, FINAL
from connectcore.effects import Audit
from connectcore.federation.boxes import BOX_ID_RE, BoxError, BoxKeys

VERSION = 1
SIGNATURE_BYTES = 64
NONCE_BYTES = 24
MAX_WIRE_BYTES = 64 * 1024
SKEW_BOUND = 300.0  # seconds a sender's clock may be ahead
RETENTION = 24 * 3600.0  # seconds a receiving box keeps the identities it received
ID_TTL = DEFAULT_LIMITS.id_ttl  # the id's hour
AUDIT_EVENT = "federation.envelope"
REFUSAL_AUDIT_EVERY = 60.0  # seconds between audit records of one box's refusals for one reason
#: (box, reason) -> (when a refusal of that kind was last audited, how many were left out since)
RefusalAudits = dict[tuple[str, str], tuple[float, int]]


class Kind(StrEnum):
    MESSAGE = "message"
    RECEIPT = "receipt"
    CANCEL = "cancel"
    PAIR_REQUEST = "pair_request"
    PAIR_ACCEPT = "pair_accept"
    PAIR_DECLINE = "pair_decline"
    UNPAIR = "unpair"
    DIRECTORY = "directory"  # a directory entry (remote_directory.py): put in the bucket, heard by its reader
    HISTORY_QUERY = "history_query"  # a history search asked of another box (remote_history.py): a request
    HISTORY_ANSWER = "history_answer"  # its answer, the reply to that request


#: The subject's third token per kind: ``connect.<to>.<token>.<from>``.
SUBJECT_TOKEN: Mapping[Kind, str] = {
    Kind.MESSAGE: "inbox",
    Kind.RECEIPT: "receipts",
    Kind.CANCEL: "cancel",
    Kind.PAIR_REQUEST: "pairing",
    Kind.PAIR_ACCEPT: "pairing",
    Kind.PAIR_DECLINE: "pairing",
    Kind.UNPAIR: "pairing",
    Kind.DIRECTORY: "directory",  # (the bucket's republish: ``connect.<reader>.directory.<publisher>``)
    # (a core NATS request on ``connect.<to>.history`` and its reply: the judgement reads the subject
    # ``connect.<to>.history.<from>``, ``from`` being the box asked or, for a query, the outer's own)
    Kind.HISTORY_QUERY: "history",
    Kind.HISTORY_ANSWER: "history",
}
PAIRING_KINDS = frozenset({Kind.PAIR_REQUEST, Kind.PAIR_ACCEPT, Kind.PAIR_DECLINE, Kind.UNPAIR})

#: The routing fields beyond ``v``, ``kind``, ``from`` and ``to``, per kind (outer and inner alike).
ROUTING_FIELDS: Mapping[Kind, frozenset[str]] = {
    Kind.MESSAGE: frozenset({"pairing"}),
    Kind.RECEIPT: frozenset({"pairing"}),
    Kind.CANCEL: frozenset({"pairing"}),
    Kind.UNPAIR: frozenset({"pairing"}),
    Kind.DIRECTORY: frozenset({"pairing"}),
    Kind.HISTORY_QUERY: frozenset({"pairing"}),
    Kind.HISTORY_ANSWER: frozenset({"pairing"}),
    Kind.PAIR_REQUEST: frozenset({"invitation"}),
    Kind.PAIR_ACCEPT: frozenset({"invitation", "pairing"}),
    Kind.PAIR_DECLINE: frozenset({"invitation"}),
}

#: The inner part's own fields per kind, after the routing fields.
INNER_FIELDS: Mapping[Kind, frozenset[str]] = {
    Kind.MESSAGE: frozenset(
        {"sender", "id", "created_at", "target", "text", "conversation", "hop", "in_reply_to"}
    ),
    Kind.RECEIPT: frozenset({"message", "digest", "outcome", "reason", "at", "recipient", "card"}),
    Kind.CANCEL: frozenset({"message", "digest", "created_at", "reason", "at"}),
    Kind.PAIR_REQUEST: frozenset({"name", "secret"}),
    Kind.PAIR_ACCEPT: frozenset({"at"}),
    Kind.PAIR_DECLINE: frozenset({"at"}),
    Kind.UNPAIR: frozenset({"at", "reason"}),
    Kind.DIRECTORY: frozenset({"revision", "published_at", "agents"}),
    Kind.HISTORY_QUERY: frozenset({"id", "created_at", "asker", "query", "repo", "limit"}),
    Kind.HISTORY_ANSWER: frozenset({"query", "at", "outcome", "reason", "results"}),
}
#: The fields a kind's inner part may carry besides :data:`INNER_FIELDS` (present only when set, so an
#: inner part without them is byte for byte what it was before they existed): a history query's
#: ``session`` (``get_session box=``: one session by harness and id), a directory entry's ``tombstone``
#: (``true``: the publisher removed the pairing it names; :mod:`connectcore.federation.remote_directory`, D10).
OPTIONAL_INNER_FIELDS: Mapping[Kind, frozenset[str]] = {
    Kind.HISTORY_QUERY: frozenset({"session"}),
    Kind.DIRECTORY: frozenset({"tombstone"}),
}
SENDER_FIELDS = frozenset({"principal", "actor", "harness", "pane", "incarnation", "control"})
RECEIPT_OUTCOMES = frozenset({"accepted", *(str(s) for s in FINAL)})

_SUBJECT_RE = re.compile(r"connect\.([a-z2-7]{16})\.(inbox|receipts|cancel|pairing|directory|history)\.([a-z2-7]{16})")
_B64_RE = re.compile(r"[A-Za-z0-9_-]*")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class Refusal(StrEnum):
    """Why a receiving box refused an envelope, in the judgement's order (its first use)."""

    MALFORMED = "malformed"
    WRONG_BOX = "wrong_box"
    UNPAIRED = "unpaired"
    BAD_SIGNATURE = "bad_signature"
    BAD_BINDING = "bad_binding"
    REMOVED = "removed"
    BAD_SEAL = "bad_seal"
    CLOCK_AHEAD = "clock_ahead"
    STALE = "stale"
    CONFLICT = "conflict"
    UNKNOWN_MESSAGE = "unknown_message"


class EnvelopeError(ConnectError):
    """A part that is not a canonical envelope part of its kind; ``reason`` says which refusal it is
    (``malformed`` for an outer part, ``bad_binding`` for an inner one) and the message what is wrong."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """``connect.<to>.<token>.<from>``: the box it is for, the kind's token, the box it claims to be from."""

    to: str
    token: str
    sender: str

    def __str__(self) -> str:
        return f"connect.{self.to}.{self.token}.{self.sender}"


def refusal_audit_due(
    audited: Mapping[tuple[str, str], tuple[float, int]], actor: str, reason: str, now: float
) -> tuple[bool, int, dict[tuple[str, str], tuple[float, int]]]:
    """Whether a refusal of ``actor`` (a box, ``box:<id>``) for ``reason`` is audited now; how many of
    that box for that reason were not audited since the last record (that record's count); and the new
    state (per (box, reason): when last audited, how many since). The first of a kind is audited, then
    none until :data:`REFUSAL_AUDIT_EVERY` seconds after the last one audited: a flooding box costs one
    audit record a minute per reason, and the next record says how many were left out. ``audited`` is
    not changed; an entry a minute old with nothing left out is dropped from the result."""
    kept = {k: v for k, v in audited.items() if now - v[0] < REFUSAL_AUDIT_EVERY or v[1]}
    at, since = kept.get((actor, reason), (None, 0))
    if at is not None and now - at < REFUSAL_AUDIT_EVERY:
        kept[(actor, reason)] = (at, since + 1)
        return False, since + 1, kept
    kept[(actor, reason)] = (now, 0)
    return True, since, kept


def refusal_count_words(left_out: int) -> str:
    """What an audit record of a refusal adds when others were left out since the last one."""
    return f" (and {left_out} more refused since the last record)" if left_out else ""


def refusal_record(actor: str, detail: str, left_out: int, *, at: float, message_id: str | None = None) -> Audit:
    """The audit line of a refused envelope :func:`refusal_audit_due` says is due: ``refused``, its
    detail and how many were left out since the last one (:func:`refusal_count_words`)."""
    return Audit(actor, AUDIT_EVENT, "refused", message_id=message_id, detail=detail + refusal_count_words(left_out),
                 at=at)


def subject_for(kind: Kind, sender: str, to: str) -> str:
    """The subject an envelope of ``kind`` from ``sender`` to ``to`` is published on."""
    return str(Subject(to, SUBJECT_TOKEN[kind], sender))


def parse_subject(text: str) -> Subject | None:
    match = _SUBJECT_RE.fullmatch(text)
    return None if match is None else Subject(match.group(1), match.group(2), match.group(3))


@dataclass(frozen=True)
class Routing:
    """Who an envelope is from and for, and what relation it travels in: the outer fields the inner
    part repeats."""

    kind: Kind
    sender: str  # the sending box's id ("from")
    to: str  # the receiving box's id
    pairing: str | None = None
    invitation: str | None = None

    def __post_init__(self) -> None:
        _check_routing(self)

    def fields(self) -> dict[str, Any]:
        row: dict[str, Any] = {"v": VERSION, "kind": str(self.kind), "from": self.sender, "to": self.to}
        for name in sorted(ROUTING_FIELDS[self.kind]):
            row[name] = getattr(self, name)
        return row


def _check_routing(r: Routing) -> None:
    if not isinstance(r.kind, Kind):
        raise EnvelopeError(Refusal.MALFORMED, f"unknown envelope kind {r.kind!r}")
    for name, value in (("from", r.sender), ("to", r.to)):
        if not isinstance(value, str) or not BOX_ID_RE.fullmatch(value):
            raise EnvelopeError(Refusal.MALFORMED, f"{name} is not a box id: {value!r}")
    for name in ("pairing", "invitation"):
        value = getattr(r, name)
        if name in ROUTING_FIELDS[r.kind]:
            if not isinstance(value, str) or not _ID_RE.fullmatch(value):
                raise EnvelopeError(Refusal.MALFORMED, f"a {r.kind} names its {name} by an id, got {value!r}")
        elif value is not None:
            raise EnvelopeError(Refusal.MALFORMED, f"a {r.kind} carries no {name}")


@dataclass(frozen=True)
class Outer:
    """The signed outer part: routing, the nonce, the sealed inner part, and for a pair_request the
    requester's public keys (needed to check it: it comes before any keys are pinned)."""

    routing: Routing
    nonce: bytes
    sealed: bytes
    keys: BoxKeys | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.nonce, bytes) or len(self.nonce) != NONCE_BYTES:
            raise EnvelopeError(Refusal.MALFORMED, f"the nonce is {NONCE_BYTES} bytes")
        if not isinstance(self.sealed, bytes) or not self.sealed:
            raise EnvelopeError(Refusal.MALFORMED, "the sealed part is empty")
        if (self.keys is not None) != (self.routing.kind is Kind.PAIR_REQUEST):
            raise EnvelopeError(Refusal.MALFORMED, "only a pair_request carries the sender's keys")

    def encode(self) -> bytes:
        row = self.routing.fields()
        row["nonce"], row["sealed"] = b64(self.nonce), b64(self.sealed)
        if self.keys is not None:
            row["keys"] = {"sign": b64(self.keys.sign), "seal": b64(self.keys.seal)}
        return canonical(row)


@dataclass(frozen=True)
class Identity:
    """A message's identity: the same on both boxes, in both boxes' audit records."""

    box: str  # the sender box's id
    principal: str  # the sender box's principal id
    id: str  # the message id the sending agent chose

    def __str__(self) -> str:
        return f"{self.box}/{self.principal}/{self.id}"

    def fields(self) -> dict[str, Any]:
        return {"box": self.box, "principal": self.principal, "id": self.id}


@dataclass(frozen=True)
class Sender:
    """Who sent a message, as the sending box knows it (it is trusted for its own agents)."""

    principal: str
    actor: str
    harness: str
    pane: str
    incarnation: str
    control: bool = False


@dataclass(frozen=True)
class MessageInner:
    routing: Routing
    sender: Sender
    id: str
    created_at: float
    target: tuple[str, str]  # ("address", "%4@<token>") or ("handle", "pr:12")
    text: str
    conversation: str
    hop: int
    in_reply_to: Identity | None = None

    @property
    def identity(self) -> Identity:
        return Identity(self.routing.sender, self.sender.principal, self.id)


@dataclass(frozen=True)
class ReceiptInner:
    routing: Routing
    message: Identity
    digest: str
    outcome: str  # "accepted" or one of the six final outcomes
    reason: str
    at: float
    recipient: tuple[str, str]  # (actor, pane)
    card: str | None = None


@dataclass(frozen=True)
class CancelInner:
    routing: Routing
    message: Identity
    digest: str
    created_at: float  # the message's
    reason: str
    at: float


@dataclass(frozen=True)
class PairingInner:
    """A pairing step's inner part (its rules are pairing.py's): pair_request carries ``name`` and
    ``secret``; pair_accept and pair_decline ``at``; unpair ``at`` and ``reason``."""

    routing: Routing
    values: tuple[tuple[str, Any], ...]

    def get(self, name: str) -> Any:
        return dict(self.values)[name]


@dataclass(frozen=True)
class DirectoryInner:
    """A directory entry's inner part: its ``revision`` (higher than every earlier entry for that key),
    when it was ``published_at`` (the publisher's clock) and the ``agents`` shared, each a JSON object
    whose fields :mod:`connectcore.federation.remote_directory` checks (here only: objects). A
    ``tombstone`` (encoded only when set, as ``"tombstone": true``) says the publisher removed the
    pairing it names (remote_directory's D10)."""

    routing: Routing
    revision: int
    published_at: float
    agents: tuple[Mapping[str, Any], ...]
    tombstone: bool = False


@dataclass(frozen=True)
class HistoryQueryInner:
    """A history query's inner part: its ``id`` (the answer names it), when it was ``created_at``, the
    ``asker`` (the asking agent's actor, for the answering box's audit), the ``query`` words, the
    ``repo`` it narrows to (a repository's name, or None) and the ``limit``; ``session`` (harness,
    session id) asks for that one session instead (``get_session box=``; encoded only when set)
    (:mod:`connectcore.federation.remote_history` checks them; here only: their types)."""

    routing: Routing
    id: str
    created_at: float
    asker: str
    query: str
    repo: str | None
    limit: int
    session: tuple[str, str] | None = None


@dataclass(frozen=True)
class HistoryAnswerInner:
    """A history answer's inner part: the ``query`` id it answers, when (``at``), the ``outcome``
    (``results``, ``not_shared`` or ``refused``), a ``reason`` and the ``results`` (JSON objects whose
    fields :mod:`connectcore.federation.remote_history` checks)."""

    routing: Routing
    query: str
    at: float
    outcome: str
    reason: str
    results: tuple[Mapping[str, Any], ...]


Inner = MessageInner | ReceiptInner | CancelInner | PairingInner | DirectoryInner | HistoryQueryInner | HistoryAnswerInner


# --------------------------------------------------------------------------------------------------
# The canonical encoding
# --------------------------------------------------------------------------------------------------


def canonical(row: Mapping[str, Any]) -> bytes:
    """The one byte form of a JSON object: UTF-8, keys sorted, no whitespace, no NaN."""
    return json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def unb64(text: Any, what: str, reason: Refusal) -> bytes:
    if not isinstance(text, str) or not _B64_RE.fullmatch(text) or len(text) % 4 == 1:
        raise EnvelopeError(reason, f"{what} is not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise EnvelopeError(reason, f"{what} is not base64url") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load(data: bytes, what: str, reason: Refusal) -> dict[str, Any]:
    try:
        row = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise EnvelopeError(reason, f"the {what} part is not JSON ({exc})") from None
    if not isinstance(row, dict):
        raise EnvelopeError(reason, f"the {what} part is not a JSON object")
    return row


def _routing_of(row: Mapping[str, Any], reason: Refusal, what: str) -> Routing:
    if row.get("v") != VERSION or isinstance(row.get("v"), bool):
        raise EnvelopeError(reason, f"the {what} part is not version {VERSION}")
    try:
        kind = Kind(str(row.get("kind")))
    except ValueError:
        raise EnvelopeError(reason, f"unknown envelope kind {row.get('kind')!r}") from None
    try:
        return Routing(
            kind,
            row.get("from"),  # type: ignore[arg-type]
            row.get("to"),  # type: ignore[arg-type]
            row.get("pairing"),
            row.get("invitation"),
        )
    except EnvelopeError as exc:
        raise EnvelopeError(reason, str(exc)) from None


def parse_outer(data: bytes) -> Outer:
    """The outer part ``data`` holds, or :class:`EnvelopeError` (``malformed``) saying why."""
    row = _load(data, "outer", Refusal.MALFORMED)
    routing = _routing_of(row, Refusal.MALFORMED, "outer")
    expected = {"v", "kind", "from", "to", "nonce", "sealed", *ROUTING_FIELDS[routing.kind]}
    if routing.kind is Kind.PAIR_REQUEST:
        expected.add("keys")
    _exact(row, expected, Refusal.MALFORMED, f"the outer part of a {routing.kind}")
    keys = None
    if routing.kind is Kind.PAIR_REQUEST:
        carried = row["keys"]
        if not isinstance(carried, dict) or set(carried) != {"sign", "seal"}:
            raise EnvelopeError(Refusal.MALFORMED, "a pair_request's keys are {sign, seal}")
        try:
            keys = BoxKeys(
                unb64(carried["sign"], "keys.sign", Refusal.MALFORMED),
                unb64(carried["seal"], "keys.seal", Refusal.MALFORMED),
            )
        except BoxError as exc:
            raise EnvelopeError(Refusal.MALFORMED, str(exc)) from None
    outer = Outer(
        routing,
        unb64(row["nonce"], "the nonce", Refusal.MALFORMED),
        unb64(row["sealed"], "the sealed part", Refusal.MALFORMED),
        keys,
    )
    if outer.encode() != data:
        raise EnvelopeError(Refusal.MALFORMED, "the outer part is not in canonical form")
    return outer


def _exact(row: Mapping[str, Any], expected: set[str] | frozenset[str], reason: Refusal, what: str) -> None:
    if set(row) != set(expected):
        missing, extra = sorted(set(expected) - set(row)), sorted(set(row) - set(expected))
        raise EnvelopeError(reason, f"{what} lacks {missing} or has unknown fields {extra}")


def encode_inner(inner: Inner) -> bytes:
    """The canonical bytes of an inner part (what is sealed, and what its digest covers)."""
    row = inner.routing.fields()
    if isinstance(inner, MessageInner):
        s = inner.sender
        row.update(
            sender={"principal": s.principal, "actor": s.actor, "harness": s.harness, "pane": s.pane,
                    "incarnation": s.incarnation, "control": s.control},
            id=inner.id, created_at=inner.created_at, target={inner.target[0]: inner.target[1]},
            text=inner.text, conversation=inner.conversation, hop=inner.hop,
            in_reply_to=None if inner.in_reply_to is None else inner.in_reply_to.fields(),
        )
    elif isinstance(inner, ReceiptInner):
        row.update(
            message=inner.message.fields(), digest=inner.digest, outcome=inner.outcome, reason=inner.reason,
            at=inner.at, recipient={"actor": inner.recipient[0], "pane": inner.recipient[1]}, card=inner.card,
        )
    elif isinstance(inner, CancelInner):
        row.update(
            message=inner.message.fields(), digest=inner.digest, created_at=inner.created_at,
            reason=inner.reason, at=inner.at,
        )
    elif isinstance(inner, DirectoryInner):
        row.update(revision=inner.revision, published_at=inner.published_at, agents=[dict(a) for a in inner.agents])
        if inner.tombstone:
            row.update(tombstone=True)
    elif isinstance(inner, HistoryQueryInner):
        row.update(id=inner.id, created_at=inner.created_at, asker=inner.asker, query=inner.query, repo=inner.repo,
                   limit=inner.limit)
        if inner.session is not None:
            row.update(session={"harness": inner.session[0], "id": inner.session[1]})
    elif isinstance(inner, HistoryAnswerInner):
        row.update(query=inner.query, at=inner.at, outcome=inner.outcome, reason=inner.reason,
                   results=[dict(r) for r in inner.results])
    else:
        row.update(dict(inner.values))
    return canonical(row)


def digest_of(inner_bytes: bytes) -> str:
    """A message's digest: SHA-256 of its canonical inner part, hex."""
    return hashlib.sha256(inner_bytes).hexdigest()


class _Fields:
    """Typed reads of one JSON object's fields; a wrong type is ``bad_binding`` naming the field."""

    def __init__(self, row: Mapping[str, Any], where: str) -> None:
        self.row, self.where = row, where

    def _bad(self, name: str, want: str) -> EnvelopeError:
        return EnvelopeError(Refusal.BAD_BINDING, f"{self.where}.{name} is not {want}: {self.row.get(name)!r}")

    def text(self, name: str, *, empty: bool = True) -> str:
        value = self.row.get(name)
        if not isinstance(value, str) or (not empty and not value):
            raise self._bad(name, "a string" if empty else "a non-empty string")
        return value

    def opt_str(self, name: str) -> str | None:
        return None if self.row.get(name) is None else self.text(name)

    def number(self, name: str) -> float:
        value = self.row.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(name, "a number")
        return value

    def count(self, name: str) -> int:
        value = self.row.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._bad(name, "a count")
        return value

    def flag(self, name: str) -> bool:
        value = self.row.get(name)
        if not isinstance(value, bool):
            raise self._bad(name, "true or false")
        return value

    def obj(self, name: str, keys: set[str] | frozenset[str]) -> _Fields:
        value = self.row.get(name)
        if not isinstance(value, dict):
            raise self._bad(name, "an object")
        _exact(value, keys, Refusal.BAD_BINDING, f"{self.where}.{name}")
        return _Fields(value, f"{self.where}.{name}")

    def digest(self, name: str) -> str:
        value = self.text(name)
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            raise self._bad(name, "a SHA-256 in hex")
        return value

    def identity(self, name: str) -> Identity:
        f = self.obj(name, {"box", "principal", "id"})
        box = f.text("box")
        if not BOX_ID_RE.fullmatch(box):
            raise f._bad("box", "a box id")
        return Identity(box, f.text("principal", empty=False), f.text("id", empty=False))


def parse_inner(data: bytes, outer: Outer) -> Inner:
    """The inner part ``data`` holds, checked against ``outer``'s routing, or :class:`EnvelopeError`
    (``bad_binding``) saying why."""
    row = _load(data, "inner", Refusal.BAD_BINDING)
    routing = _routing_of(row, Refusal.BAD_BINDING, "inner")
    if routing != outer.routing:
        raise EnvelopeError(Refusal.BAD_BINDING, "the inner routing differs from the outer routing")
    kind = routing.kind
    present = set(OPTIONAL_INNER_FIELDS.get(kind, frozenset())) & set(row)
    _exact(row, {"v", "kind", "from", "to", *ROUTING_FIELDS[kind], *INNER_FIELDS[kind], *present}, Refusal.BAD_BINDING,
           f"the inner part of a {kind}")
    f = _Fields(row, str(kind))
    inner: Inner
    if kind is Kind.MESSAGE:
        s = f.obj("sender", SENDER_FIELDS)
        target = row["target"]
        if not (isinstance(target, dict) and len(target) == 1 and set(target) <= {"address", "handle"}):
            raise f._bad("target", "{address} or {handle}")
        ((target_kind, target_value),) = target.items()
        if not isinstance(target_value, str) or not target_value:
            raise f._bad("target", "a target")
        inner = MessageInner(
            routing,
            Sender(s.text("principal", empty=False), s.text("actor", empty=False), s.text("harness"), s.text("pane"),
                   s.text("incarnation"), s.flag("control")),
            f.text("id", empty=False), f.number("created_at"), (target_kind, target_value), f.text("text"),
            f.text("conversation"), f.count("hop"),
            None if row["in_reply_to"] is None else f.identity("in_reply_to"),
        )
    elif kind is Kind.RECEIPT:
        recipient = f.obj("recipient", {"actor", "pane"})
        outcome = f.text("outcome")
        if outcome not in RECEIPT_OUTCOMES:
            raise f._bad("outcome", "accepted or a final outcome")
        inner = ReceiptInner(
            routing, f.identity("message"), f.digest("digest"), outcome, f.text("reason"), f.number("at"),
            (recipient.text("actor"), recipient.text("pane")), f.opt_str("card"),
        )
    elif kind is Kind.CANCEL:
        inner = CancelInner(
            routing, f.identity("message"), f.digest("digest"), f.number("created_at"), f.text("reason"), f.number("at")
        )
    elif kind is Kind.DIRECTORY:
        agents = row["agents"]
        if not isinstance(agents, list) or not all(isinstance(a, dict) for a in agents):
            raise f._bad("agents", "a list of objects")
        inner = DirectoryInner(routing, f.count("revision"), f.number("published_at"), tuple(agents),
                               f.flag("tombstone") if "tombstone" in row else False)
    elif kind is Kind.HISTORY_QUERY:
        session = None
        if "session" in row:
            asked = f.obj("session", {"harness", "id"})
            session = (asked.text("harness", empty=False), asked.text("id", empty=False))
        inner = HistoryQueryInner(routing, f.text("id", empty=False), f.number("created_at"), f.text("asker"),
                                  f.text("query"), f.opt_str("repo"), f.count("limit"), session)
    elif kind is Kind.HISTORY_ANSWER:
        results = row["results"]
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise f._bad("results", "a list of objects")
        inner = HistoryAnswerInner(routing, f.text("query", empty=False), f.number("at"), f.text("outcome"),
                                   f.text("reason"), tuple(results))
    else:
        if kind is Kind.PAIR_REQUEST:
            f.text("name", empty=False), f.text("secret", empty=False)
        else:
            f.number("at")
            if kind is Kind.UNPAIR:
                f.text("reason")
        inner = PairingInner(routing, tuple(sorted((k, row[k]) for k in INNER_FIELDS[kind])))
    if encode_inner(inner) != data:
        raise EnvelopeError(Refusal.BAD_BINDING, "the inner part is not in canonical form")
    return inner


# --------------------------------------------------------------------------------------------------
# The judgement
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """What this box has pinned for one other box: its keys, its active pairing (if any) and every
    pairing ever made with it (removed ones stay, so their envelopes are refused ``removed``)."""

    keys: BoxKeys
    active: str | None = None
    pairings: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Held:
    """What this box holds for an identity it received: the inner digest and the outcome its receipt
    says (``accepted`` or final), or a cancel's tombstone (``cancelled``, committed before the message)."""

    digest: str
    outcome: str
    tombstone: bool = False


@dataclass(frozen=True)
class View:
    """What the judgement reads of this box: its id, its pinned peers by box id, the identities it
    holds (inbox records and tombstones, for the retention), the digests of messages it sent (its
    outbox), the time, and the bounds."""

    own: str
    peers: Mapping[str, Peer] = field(default_factory=dict)
    retained: Mapping[Identity, Held] = field(default_factory=dict)
    sent: Mapping[Identity, str] = field(default_factory=dict)
    now: float = 0.0
    skew_bound: float = SKEW_BOUND
    retention: float = RETENTION
    id_ttl: float = ID_TTL


@dataclass(frozen=True)
class Facts:
    """What the shell reports about one wire: its subject and size, whether the signature verified
    (``None``: there was no key to check it with), the outer bytes, and the inner bytes if the seal
    opened (``None``: it did not, or was not tried)."""

    subject: str
    size: int
    signature_ok: bool | None
    outer: bytes
    opened: bytes | None


class Decision(StrEnum):
    REFUSED = "refused"
    DUPLICATE = "duplicate"  # held with the same digest: answer the receipt held, commit nothing
    TOO_LATE = "too_late"  # commit the identity `expired`, answer it
    CANCELLED_FIRST = "cancelled_first"  # held as a tombstone: answer `cancelled`
    TOMBSTONE = "tombstone"  # a cancel for a message not held: commit the tombstone, answer `cancelled`
    NEW = "new"  # a message: the recipient box's rules decide
    RECEIPT = "receipt"  # a receipt for a message this box sent: the outbox steps it
    CANCEL = "cancel"  # a cancel of a message this box holds: cancelled unless typing started
    PAIRING = "pairing"  # a pairing step: the pairing rules decide
    ENTRY = "entry"  # a directory entry of the active pairing: remote_directory.py decides
    HISTORY = "history"  # a history query or answer of the active pairing: remote_history.py decides


@dataclass(frozen=True)
class Verdict:
    """The judgement of one wire: what was decided, the audit note, and what (if anything) the box
    commits (``record`` for ``identity``) and answers (``answer``: the outcome of the receipt to publish)."""

    decision: Decision
    actor: str
    reason: Refusal | None = None
    detail: str = ""
    inner: Inner | None = None
    digest: str | None = None
    identity: Identity | None = None
    record: Held | None = None
    answer: str | None = None
    # a ``removed`` refusal of a signed envelope: the pairing it named (P17: the unpair is owed again)
    pairing: str | None = None

    @property
    def audit(self) -> tuple[str, str, str]:
        """The audit note: (event, outcome, reason or detail)."""
        return AUDIT_EVENT, str(self.decision), str(self.reason) if self.reason else self.detail

    def ignored(self, at: float) -> Audit:
        """The audit line of a verdict nobody takes (a desk joined to no engine): ``ignored``, naming
        the decision."""
        return Audit(self.actor, AUDIT_EVENT, "ignored",
                     detail=f"a {self.decision} envelope: this desk is joined to no engine", at=at)


def _carried_keys(subject: Subject, outer_bytes: bytes) -> BoxKeys | Verdict:
    """A pair_request's own keys, for a pairing subject whose sender has none pinned; or the refusal."""
    actor = f"box:{subject.sender}"
    try:
        outer = parse_outer(outer_bytes)
    except EnvelopeError as exc:
        return Verdict(Decision.REFUSED, actor, Refusal.MALFORMED, str(exc))
    if outer.routing.kind is not Kind.PAIR_REQUEST or outer.keys is None:
        return Verdict(Decision.REFUSED, actor, Refusal.UNPAIRED,
                       f"box {subject.sender} is not paired with this box (a {outer.routing.kind})")
    if outer.keys.box_id != subject.sender:
        return Verdict(Decision.REFUSED, actor, Refusal.BAD_BINDING,
                       f"the keys a pair_request carries give box {outer.keys.box_id}, not {subject.sender}")
    return outer.keys


def _precheck(subject_text: str, size: int, outer_bytes: bytes, view: View) -> tuple[str, BoxKeys | Verdict]:
    subject = parse_subject(subject_text)
    actor = f"box:{subject.sender if subject else 'unknown'}"
    # 1
    if subject is None:
        return actor, Verdict(Decision.REFUSED, actor, Refusal.MALFORMED,
                              f"subject {subject_text[:120]!r} is not connect.<to>.<kind>.<from>")
    if size > MAX_WIRE_BYTES or size <= SIGNATURE_BYTES:
        return actor, Verdict(Decision.REFUSED, actor, Refusal.MALFORMED,
                              f"a wire of {size} bytes (more than {SIGNATURE_BYTES}, at most {MAX_WIRE_BYTES})")
    # 2
    if subject.to != view.own:
        return actor, Verdict(Decision.REFUSED, actor, Refusal.WRONG_BOX,
                              f"the subject is for box {subject.to}, this is box {view.own}")
    # 3
    peer = view.peers.get(subject.sender)
    if peer is not None:
        return actor, peer.keys
    if subject.token != SUBJECT_TOKEN[Kind.PAIR_REQUEST]:
        return actor, Verdict(Decision.REFUSED, actor, Refusal.UNPAIRED,
                              f"box {subject.sender} is not paired with this box")
    return actor, _carried_keys(subject, outer_bytes)


def keys_to_verify(subject: str, size: int, outer_bytes: bytes, view: View) -> BoxKeys | None:
    """The public keys the shell checks the signature and opens the seal with: those pinned for the
    subject's sender, or a pair_request's own (checked against the sender's box id); ``None`` when
    the judgement refuses before any cryptography (steps 1 to 3)."""
    found = _precheck(subject, size, outer_bytes, view)[1]
    return found if isinstance(found, BoxKeys) else None


def judge(facts: Facts, view: View) -> Verdict:
    """The verdict on one wire from the facts the shell reports, by the rules above (pure)."""
    actor, found = _precheck(facts.subject, facts.size, facts.outer, view)
    if isinstance(found, Verdict):
        return found

    def refuse(reason: Refusal, detail: str) -> Verdict:
        return Verdict(Decision.REFUSED, actor, reason, detail)

    subject = parse_subject(facts.subject)
    assert subject is not None  # _precheck refused it otherwise
    peer = view.peers.get(subject.sender)
    # 4
    if facts.signature_ok is not True:
        return refuse(Refusal.BAD_SIGNATURE, f"the signature does not verify with box {subject.sender}'s key")
    # 5
    try:
        outer = parse_outer(facts.outer)
    except EnvelopeError as exc:
        return refuse(Refusal.MALFORMED, str(exc))
    routing = outer.routing
    # 6
    if routing.to != view.own:
        return refuse(Refusal.WRONG_BOX, f"the envelope is for box {routing.to}, this is box {view.own}")
    # 7
    if routing.sender != subject.sender or SUBJECT_TOKEN[routing.kind] != subject.token:
        return refuse(Refusal.BAD_BINDING,
                      f"a {routing.kind} from {routing.sender} does not belong on subject {subject}")
    if outer.keys is not None and peer is not None and outer.keys != peer.keys:
        return refuse(Refusal.BAD_BINDING, "a pair_request's keys differ from those pinned for its box")
    if peer is None and routing.kind is not Kind.PAIR_REQUEST:  # _carried_keys refused it: a guard
        return refuse(Refusal.UNPAIRED, f"box {subject.sender} is not paired with this box")
    # 8
    in_pairing = (Kind.MESSAGE, Kind.RECEIPT, Kind.CANCEL, Kind.DIRECTORY, Kind.HISTORY_QUERY, Kind.HISTORY_ANSWER)
    if peer is not None and routing.kind in in_pairing and (peer.active is None or routing.pairing != peer.active):
        return replace(refuse(Refusal.REMOVED, f"pairing {routing.pairing} is not the active pairing with that box"),
                       pairing=routing.pairing)
    if (peer is not None and routing.kind is Kind.UNPAIR
            and routing.pairing not in peer.pairings | {peer.active}):
        return refuse(Refusal.REMOVED, f"box {subject.sender} never had pairing {routing.pairing} with this box")
    # 9
    if facts.opened is None:
        return refuse(Refusal.BAD_SEAL, f"the sealed part does not open with box {subject.sender}'s key")
    # 10
    try:
        inner = parse_inner(facts.opened, outer)
    except EnvelopeError as exc:
        return refuse(Refusal.BAD_BINDING, str(exc))
    digest = digest_of(facts.opened)
    # 11
    stamp = _stamp(inner)
    if stamp is not None and stamp > view.now + view.skew_bound:
        return refuse(Refusal.CLOCK_AHEAD,
                      f"stamped {stamp - view.now:.0f} s ahead of this box (the bound is {view.skew_bound:.0f} s)")
    if isinstance(inner, PairingInner):
        return Verdict(Decision.PAIRING, actor, inner=inner, digest=digest)
    if isinstance(inner, DirectoryInner):
        return Verdict(Decision.ENTRY, actor, inner=inner, digest=digest)
    if isinstance(inner, HistoryQueryInner | HistoryAnswerInner):
        return Verdict(Decision.HISTORY, actor, inner=inner, digest=digest)
    if isinstance(inner, ReceiptInner):
        if inner.message.box != view.own or view.sent.get(inner.message) != inner.digest:
            return refuse(Refusal.UNKNOWN_MESSAGE, f"this box sent no message {inner.message} with that digest")
        return Verdict(Decision.RECEIPT, actor, inner=inner, digest=digest, identity=inner.message)
    # 12
    created = inner.created_at
    if created < view.now - view.retention:
        return refuse(Refusal.STALE, f"created {view.now - created:.0f} s ago, older than the retention "
                                     f"({view.retention:.0f} s): a replay")
    if isinstance(inner, CancelInner):
        if inner.message.box != routing.sender:
            return refuse(Refusal.UNKNOWN_MESSAGE, f"box {routing.sender} did not send message {inner.message}")
        return _cancel(inner, digest, actor, view)
    return _message(inner, digest, actor, view)


def _stamp(inner: Inner) -> float | None:
    if isinstance(inner, MessageInner):
        return inner.created_at
    if isinstance(inner, ReceiptInner | CancelInner):
        return inner.at
    if isinstance(inner, DirectoryInner):
        return inner.published_at
    if isinstance(inner, HistoryQueryInner):
        return inner.created_at
    if isinstance(inner, HistoryAnswerInner):
        return inner.at
    return inner.get("at") if inner.routing.kind is not Kind.PAIR_REQUEST else None


def _message(inner: MessageInner, digest: str, actor: str, view: View) -> Verdict:
    identity = inner.identity
    held = view.retained.get(identity)
    # 13
    if held is not None and held.digest != digest:
        return Verdict(Decision.REFUSED, actor, Refusal.CONFLICT,
                       f"this box holds {identity} with other content: a reused id")
    if held is not None and held.tombstone:
        return Verdict(Decision.CANCELLED_FIRST, actor, detail="cancelled before it arrived", inner=inner,
                       digest=digest, identity=identity, answer="cancelled")
    if held is not None:
        return Verdict(Decision.DUPLICATE, actor, detail=f"held: {held.outcome}", inner=inner, digest=digest,
                       identity=identity, answer=held.outcome)
    if inner.created_at < view.now - view.id_ttl:
        return Verdict(Decision.TOO_LATE, actor, detail="reached this box after the id's hour; not accepted",
                       inner=inner, digest=digest, identity=identity, record=Held(digest, "expired"),
                       answer="expired")
    return Verdict(Decision.NEW, actor, inner=inner, digest=digest, identity=identity)


def _cancel(inner: CancelInner, digest: str, actor: str, view: View) -> Verdict:
    identity = inner.message
    held = view.retained.get(identity)
    # 13
    if held is not None and held.digest != inner.digest:
        return Verdict(Decision.REFUSED, actor, Refusal.CONFLICT,
                       f"this box holds {identity} with another digest than the cancel names")
    if held is not None and held.tombstone:
        return Verdict(Decision.DUPLICATE, actor, detail="cancel held", inner=inner, digest=digest,
                       identity=identity, answer="cancelled")
    if held is not None:
        return Verdict(Decision.CANCEL, actor, inner=inner, digest=digest, identity=identity)
    return Verdict(Decision.TOMBSTONE, actor, detail="cancelled before it arrived", inner=inner, digest=digest,
                   identity=identity, record=Held(inner.digest, "cancelled", tombstone=True), answer="cancelled")
