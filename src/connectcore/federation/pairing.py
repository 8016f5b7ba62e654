"""Pairing: invitations, pair requests and pairings, their tables, atomic consumption, repeats and
conflicts (the core of docs/federation.md, "Pairing").

Rules:

P1  Two approvals. The invitee's owner accepts a code (:func:`accept_code`: its pairing ``requested``,
    the inviter's keys pinned from the code); the inviter's owner approves the request that code sent
    (:func:`approve`). On the inviter a pairing exists only once approved, and is created ``active``.
P2  The invitation keeps the SHA-256 of its secret, never the secret (as for tokens). A request's
    secret is hashed here and compared with :func:`hmac.compare_digest` (constant time). It lives
    15 minutes by default, at most 24 hours (:data:`DEFAULT_EXPIRES`, :data:`MAX_EXPIRES`).
P3  A received request is judged in this order, the first that holds deciding: ``unknown_invitation``;
    ``bad_secret``; a request from the same box on the same invitation is a **repeat** (after the
    decision it answers the stored decision, :func:`answer`; before it, it is the pending request
    again: either way nothing changes); a decided (consumed) invitation refuses anything else
    ``invitation_used`` (a conflicting answer fails); ``invitation_revoked``; ``invitation_expired``
    (by state, or ``now`` at or past its expiry); ``self_pairing``; ``already_paired`` (an active
    pairing with that box exists: remove it first). Otherwise the request is stored ``pending``;
    several may be pending on one invitation.
P4  One invitation, one decision, in one step: :func:`approve` consumes the invitation, approves the
    request, refuses every other pending request on it (``invitation_used``) and makes the pairing
    ``active`` with the requester's keys pinned and a pairing id given as a value; :func:`decline`
    consumes the invitation and declines the request, refusing the others the same way.
P5  At most one active pairing per remote box (``already_paired``), checked when a request arrives, at
    approval, when the invitee accepts a code and when its pair_accept arrives.
P6  Names. A pairing's name is unique among this box's own name and its active pairings'
    (:func:`connectcore.federation.boxes.check_name_free`); a collision refuses the approval (or the
    acceptance of a code) ``name_taken``, asking for another name. The name stays when the peer
    renames itself.
P7  Removal is permanent for that pairing: the row stays (its id, its pinned keys, when and by whom:
    ``removed_by`` is :data:`BY_OWNER` or :data:`BY_PEER`) and nothing makes it active again. Removing
    a removed pairing is refused ``removed``; a peer's repeated unpair changes nothing. Pairing again
    needs a new invitation and makes a new pairing.
P8  Expiry by ``now`` (:func:`expire`): an open invitation past its expiry expires with its pending
    requests; an invitee's requested pairing expires :data:`ANSWER_GRACE` after the code's expiry (the
    inviter may approve until the code expires, and its answer may take a while to arrive).
P9  Every refusal is a :class:`PairingError` (a :class:`ConnectError`) with a reason code
    (:class:`Refusal`) and a message naming the problem, and changes nothing (auditing it is the
    caller's: :meth:`PairingError.audit`). An event a table does not allow is a bug in the caller and
    raises :class:`connectcore._machine.TransitionNotAllowed`. Every state change goes through a table.
P10 The core invents nothing: ids (invitation, request, pairing), the secret's hash, ``now`` and who
    took a person's step (``actor``: the audit actor the owner API resolved, such as ``owner`` or the
    page session ``owner:page:<id>``; :data:`OWNER` by default) arrive as values. Each step returns
    ``(book, effects)``: a :class:`Persist` per record it changed, one :class:`Audit`, and a
    :class:`Notify` (topic :data:`TOPIC`) for the owner's page where a person decides or must know. What the inviter publishes after a decision (and again on a repeat) is
    :func:`answer`'s to say; publishing is the shell's (slice 4's daemon flow).
P11 What a person names (``pair approve WHO``, ``pair remove WHO``) is looked up here, never guessed:
    :func:`pending_request` finds the one pending request whose id, requester's box id or name is
    ``who`` (none: ``unknown_request``, listing the pending ones; several: ``ambiguous``, naming their
    ids to give instead); :func:`pairing_named` the pairing whose name, box id, pairing id or invitation
    id is ``who`` (none: ``unknown_pairing``), of several the latest one ``active`` or ``requested``,
    else the latest (a removed or expired one is still found, and its step says what it is);
    :func:`box_name` the name a person reads for a box id, by the same rule.
P12 Per-pairing settings (:class:`connectcore.federation.remote.PairingSettings`: ``messages`` on or
    off, ``per_window``, ``live_ids``, ``queued_bytes``, which the recipient box's rules R1 and R5 read;
    ``directory`` (``reachable``, ``connected`` or ``none``: what of this box's directory the pairing
    sees), ``history`` (``none`` or ``index``) and ``history_repos`` (repository names, comma separated,
    at most :data:`MAX_HISTORY_REPOS`; empty: none), which this box's answers to that box read)
    are kept with the pairing (:attr:`Pairing.settings`, the defaults until the person sets one).
    :func:`set_settings` takes ``KEY=VALUE`` words (``pair set BOX KEY=VALUE...``) and sets them on an
    active or requested pairing in one step, all or none: a word that is no ``KEY=VALUE``
    (``bad_setting``), a key that is no setting (``unknown_setting``), one given twice
    (``bad_setting``), a value of the wrong kind (``bad_setting``: ``messages`` is ``on`` or ``off``,
    ``directory`` and ``history`` one of :data:`SETTING_CHOICES`, ``history_repos`` names that are no
    path, each once, the others whole numbers) or outside its range (``setting_out_of_range``,
    :data:`SETTING_RANGES`; more than :data:`MAX_HISTORY_REPOS` repositories), a
    removed or ended pairing (``removed``, ``not_active``) are each refused naming the problem.
    :func:`settings_words` writes settings back as the same words.
P13 Accepting a code. A code naming this box itself is refused ``self_pairing`` before anything is
    looked at (:func:`check_code_not_own`). The same code again (the pairing its invitation made is
    with the code's box and keys, and still ``requested`` or ``active``) is a **repeat**
    (:func:`code_repeat`): the person is answered that pairing and nothing changes; any other
    pairing on that invitation is :func:`accept_code`'s (``invitation_used``).
P14 A repeated pair_request (:func:`receive_request`'s repeat: the same box with the same keys on
    that invitation, :func:`repeated_request`) is answered again only when an answer to that request
    was made and kept (:func:`answer_again`, given the ids of the requests whose answer the shell
    holds); a repeat while pending, or of a decision that made no answer, gets none.
P15 What a step ended (:func:`pairings_ended`): the pairings whose state it changed (an
    :func:`expire` tick's requested pairings); what they asked (the invitee's pair_request) is
    asked no more.
P16 What travels in a pairing and what the judgement reads: a message, receipt, cancel or history
    answer is sealed only for an active pairing, by box and pairing id (:meth:`PairBook.active_in`);
    the judgement pins per box the keys, the active pairing and every pairing id ever made
    (:func:`envelope_peers`; removed ones stay, so their envelopes are refused ``removed``), and the
    inbox refuses the removed pairings (:meth:`PairBook.removed_ids`).
P17 A lost unpair is sent again. The unpair a removal owes is published once; if it is lost, the
    other box keeps the pairing active and goes on sending across it. Each such envelope, signed by
    that box and refused here ``removed``, names a pairing this box's owner removed: its unpair is
    owed again (:func:`unpair_again`; at most once a minute per box, with the refusal's audit record,
    :func:`connectcore.federation.envelope.refusal_audit_due`). A pairing the other box removed, or
    one never active here (no id, no unpair), owes nothing.
P18 What a removal tells the other box. A removal by this box's owner owes the other box a signed
    ``unpair`` and a directory tombstone (:func:`connectcore.federation.remote_directory.tombstone`,
    D10), both naming the removed pairing's id (:func:`removal_notice`); a pairing with no id (still
    requested here: the inviter never answered) or one the other box removed owes neither. The
    directory key this box writes for a box holds the tombstone while that box's latest pairing with
    an id is one this box's owner removed (:func:`tombstones_owed`): a newer pairing's entries replace
    it. A verified tombstone is stepped here as a received unpair is (:func:`removed_by_peer`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from connectcore._machine import ConnectError, Table, freeze
from connectcore.effects import Audit, Effect, Notify, Persist
from connectcore.federation import remote_directory as RD
from connectcore.federation.boxes import BoxError, BoxKeys, check_box_id, check_box_name, check_name_free
from connectcore.federation.envelope import EnvelopeError, Peer, Verdict, b64, canonical, unb64
from connectcore.federation.envelope import Refusal as EnvelopeRefusal
from connectcore.federation.remote import DEFAULT_SETTINGS, PairingSettings

DEFAULT_EXPIRES = 15 * 60.0  # seconds an invitation lives by default
MAX_EXPIRES = 24 * 3600.0  # the longest an invitation may live
ANSWER_GRACE = 3600.0  # seconds past the code's expiry an invitee waits for the inviter's answer
SECRET_HASH_HEX = 64  # the SHA-256 of a secret, in hex
TOPIC = "pairing"  # Notify.topic of every pairing notice
OWNER = "owner"  # the default audit actor of the owner's decisions (the owner token's)
BY_OWNER = "owner"  # removed_by: this box's owner removed it
BY_PEER = "peer"  # removed_by: the other box removed it (its unpair or tombstone)

CODE_PREFIX = "connect-invite-1:"  # what an invitation code starts with
SECRET_BYTES = 32  # an invitation's secret
STORE_INVITATION = "pair_invitation"  # Persist.kind of each record
STORE_REQUEST = "pair_request"
STORE_PAIRING = "pairing"

#: The inclusive range of each numeric per-pairing setting (P12): messages a minute, live message ids
#: and queued bytes the other box may hold here, all its principals together.
SETTING_RANGES: Mapping[str, tuple[int, int]] = MappingProxyType({
    "per_window": (1, 600),
    "live_ids": (1, 100_000),
    "queued_bytes": (1024, 64 * 1024 * 1024),
})
#: The values each choice setting may take (P12): what of this box's directory the pairing sees, and
#: what this box answers its history queries.
SETTING_CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "directory": tuple(RD.Setting),
    "history": ("none", "index"),
})
HISTORY_REPOS = "history_repos"  # the repositories a history answer may come from: names, comma separated
MAX_HISTORY_REPOS = 64  # the most repositories one pairing may list
_REPO_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")  # a repository's name (never a path)
SETTING_KEYS = ("messages", *SETTING_RANGES, *SETTING_CHOICES, HISTORY_REPOS)  # every setting, as shown
_ON, _OFF = frozenset({"on", "true"}), frozenset({"off", "false"})


# --------------------------------------------------------------------------------------------------
# Rules as data
# --------------------------------------------------------------------------------------------------


class InvitationState(StrEnum):
    OPEN = "open"  # printed; requests may use it
    CONSUMED = "consumed"  # decided (approved or declined) (final)
    EXPIRED = "expired"  # past its expiry, undecided (final)
    REVOKED = "revoked"  # the owner withdrew it (final)


class RequestState(StrEnum):
    PENDING = "pending"  # waits for the owner
    APPROVED = "approved"  # (final)
    DECLINED = "declined"  # (final)
    REFUSED = "refused"  # another request on its invitation was decided, or it was revoked (final)
    EXPIRED = "expired"  # its invitation expired first (final)


class PairingState(StrEnum):
    REQUESTED = "requested"  # the invitee accepted a code and waits for the inviter's answer
    ACTIVE = "active"
    DECLINED = "declined"  # (final)
    EXPIRED = "expired"  # (final)
    REMOVED = "removed"  # by either side; permanent (final)


class Role(StrEnum):
    INVITER = "inviter"  # this box printed the invitation
    INVITEE = "invitee"  # this box accepted the code


_I, _R, _P = InvitationState, RequestState, PairingState

INVITATION_TABLE: Table[InvitationState] = Table(
    name="invitation",
    initial=_I.OPEN,
    finals=frozenset({_I.CONSUMED, _I.EXPIRED, _I.REVOKED}),
    edges=(
        (_I.OPEN, "approve", _I.CONSUMED),
        (_I.OPEN, "decline", _I.CONSUMED),
        (_I.OPEN, "expire", _I.EXPIRED),
        (_I.OPEN, "revoke", _I.REVOKED),
    ),
)

REQUEST_TABLE: Table[RequestState] = Table(
    name="pair_request",
    initial=_R.PENDING,
    finals=frozenset({_R.APPROVED, _R.DECLINED, _R.REFUSED, _R.EXPIRED}),
    edges=(
        (_R.PENDING, "approve", _R.APPROVED),
        (_R.PENDING, "decline", _R.DECLINED),
        (_R.PENDING, "invitation_used", _R.REFUSED),
        (_R.PENDING, "expire", _R.EXPIRED),
    ),
)

PAIRING_TABLE: Table[PairingState] = Table(
    name="pairing",
    initial=_P.REQUESTED,  # on the invitee; the inviter creates it active by the approval (P1)
    finals=frozenset({_P.DECLINED, _P.EXPIRED, _P.REMOVED}),
    edges=(
        (_P.REQUESTED, "pair_accept", _P.ACTIVE),
        (_P.REQUESTED, "pair_decline", _P.DECLINED),
        (_P.REQUESTED, "expire", _P.EXPIRED),
        (_P.REQUESTED, "remove", _P.REMOVED),
        (_P.ACTIVE, "remove", _P.REMOVED),
        (_P.ACTIVE, "removed_by_peer", _P.REMOVED),
    ),
)


class Refusal(StrEnum):
    """Why a pairing step was refused."""

    UNKNOWN_INVITATION = "unknown_invitation"
    BAD_SECRET = "bad_secret"
    INVITATION_USED = "invitation_used"
    INVITATION_REVOKED = "invitation_revoked"
    INVITATION_EXPIRED = "invitation_expired"
    SELF_PAIRING = "self_pairing"
    ALREADY_PAIRED = "already_paired"
    NAME_TAKEN = "name_taken"
    BAD_NAME = "bad_name"
    BAD_EXPIRY = "bad_expiry"
    ID_IN_USE = "id_in_use"
    UNKNOWN_REQUEST = "unknown_request"
    NOT_PENDING = "not_pending"
    UNKNOWN_PAIRING = "unknown_pairing"
    NOT_REQUESTED = "not_requested"
    REMOVED = "removed"
    BAD_ID = "bad_id"
    BAD_CODE = "bad_code"
    AMBIGUOUS = "ambiguous"
    UNKNOWN_SETTING = "unknown_setting"
    BAD_SETTING = "bad_setting"
    SETTING_OUT_OF_RANGE = "setting_out_of_range"
    NOT_ACTIVE = "not_active"


class PairingError(ConnectError):
    """A refused pairing step: ``reason`` (:class:`Refusal`) and a message naming the problem. Nothing
    changed."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def audit(self, *, actor: str, action: str, target: str | None = None, at: float = 0.0) -> Audit:
        """The audit line the caller writes for this refusal."""
        return Audit(
            actor=actor,
            action=action,
            outcome="refused",
            target=target,
            detail=f"{self.reason}: {self}",
            at=at,
        )


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Invitation:
    """An invitation this box printed. Never its secret: the SHA-256 of it, in hex (P2)."""

    id: str
    secret_hash: str
    created_at: float
    expires_at: float
    state: InvitationState = _I.OPEN
    decided_at: float | None = None


@dataclass(frozen=True)
class PairRequest:
    """A pair_request this box received on one of its invitations."""

    id: str
    invitation: str
    box_id: str
    keys: BoxKeys
    name: str  # the requester's own name for itself
    received_at: float
    state: RequestState = _R.PENDING
    reason: str = ""  # why it was refused or expired
    decided_at: float | None = None
    pairing: str | None = None  # the pairing its approval made


@dataclass(frozen=True)
class Pairing:
    """A pairing with another box, keyed in the book by the invitation that made it (both boxes know
    it; the invitee learns the pairing id only from the pair_accept)."""

    invitation: str
    role: Role
    box_id: str
    keys: BoxKeys  # pinned
    name: str  # this box's name for the other box
    state: PairingState
    since: float  # when it entered its state
    id: str | None = None  # the pairing id the inviter chose (None while requested)
    expires_at: float | None = None  # an invitee's requested pairing: when it gives up waiting
    removed_by: str | None = None  # BY_OWNER or BY_PEER once removed
    settings: PairingSettings = DEFAULT_SETTINGS  # what the person set for it (P12)


@dataclass(frozen=True)
class PairBook:
    """Every invitation, request and pairing of this box. Read-only: steps return a new book."""

    own_box: str
    own_name: str
    invitations: Mapping[str, Invitation] = field(default_factory=dict)
    requests: Mapping[str, PairRequest] = field(default_factory=dict)
    pairings: Mapping[str, Pairing] = field(default_factory=dict)  # by invitation id

    def active(self) -> tuple[Pairing, ...]:
        return tuple(p for p in self.pairings.values() if p.state is _P.ACTIVE)

    def active_with(self, box_id: str) -> Pairing | None:
        """The active pairing with ``box_id`` (at most one, P5)."""
        return next((p for p in self.active() if p.box_id == box_id), None)

    def active_names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.active())

    def active_in(self, box_id: str, pairing_id: str | None) -> Pairing | None:
        """The pairing ``pairing_id`` with ``box_id`` while it is active (P16): the only pairing a message,
        receipt, cancel or history answer is sealed for; None otherwise."""
        return next(
            (p for p in self.pairings.values() if p.box_id == box_id and p.id == pairing_id and p.state is _P.ACTIVE),
            None,
        )

    def removed_ids(self) -> tuple[str, ...]:
        """The ids of the pairings removed (P16): the inbox refuses what arrives across them."""
        return tuple(p.id for p in self.pairings.values() if p.id and p.state is _P.REMOVED)

    def by_pairing_id(self, pairing_id: str) -> Pairing | None:
        return next((p for p in self.pairings.values() if p.id == pairing_id), None)

    def named(self, name: str) -> Pairing | None:
        """The active pairing called ``name``, else the latest requested one."""
        found = [p for p in self.pairings.values() if p.name == name and p.state in (_P.ACTIVE, _P.REQUESTED)]
        found.sort(key=lambda p: (p.state is _P.ACTIVE, p.since))
        return found[-1] if found else None

    def requests_on(self, invitation_id: str) -> tuple[PairRequest, ...]:
        return tuple(r for r in self.requests.values() if r.invitation == invitation_id)


@dataclass(frozen=True)
class Answer:
    """What the inviter publishes to the requester after a decision (and again on each repeat)."""

    kind: str  # "pair_accept" or "pair_decline"
    to: str  # the requester's box id
    invitation: str
    pairing: str | None  # the new pairing's id (pair_accept only)
    at: float


@dataclass(frozen=True, repr=False)
class Code:
    """What an invitation code carries (docs/federation.md, "Pairing"): the inviter's box id, name and
    public keys, the invitation's id, its secret and when it expires. ``repr`` hides the secret."""

    box: str
    name: str
    keys: BoxKeys
    invitation: str
    secret: bytes
    expires_at: int

    def __repr__(self) -> str:
        return f"Code(box={self.box!r}, name={self.name!r}, invitation={self.invitation!r})"


def encode_code(code: Code) -> str:
    """``connect-invite-1:<base64url of the canonical JSON>``: what ``pair invite`` prints, once."""
    row = {
        "v": 1, "box": code.box, "name": code.name, "sign": b64(code.keys.sign), "seal": b64(code.keys.seal),
        "invitation": code.invitation, "secret": b64(code.secret), "expires_at": code.expires_at,
    }
    return CODE_PREFIX + b64(canonical(row))


def decode_code(text: str) -> Code:
    """The code ``text`` holds, or a :class:`PairingError` (``bad_code``) naming what is wrong with it:
    its prefix, its encoding, its fields, or keys that do not give the box id it names."""

    def bad(why: str) -> PairingError:
        return PairingError(Refusal.BAD_CODE, f"not an invitation code: {why} (copy the whole line `pair invite` printed)")

    if not isinstance(text, str) or not text.strip().startswith(CODE_PREFIX):
        raise bad(f"it does not start with {CODE_PREFIX!r}")
    body = text.strip()[len(CODE_PREFIX):]
    try:
        raw = unb64(body, "the code", EnvelopeRefusal.MALFORMED)
        row = json.loads(raw.decode("utf-8"))
    except (EnvelopeError, UnicodeDecodeError, ValueError):
        raise bad("it is not base64url of JSON") from None
    fields = {"v", "box", "name", "sign", "seal", "invitation", "secret", "expires_at"}
    if not isinstance(row, dict) or set(row) != fields or row.get("v") != 1:
        raise bad("it is not a version 1 invitation")
    try:
        keys = BoxKeys(
            unb64(row["sign"], "sign", EnvelopeRefusal.MALFORMED), unb64(row["seal"], "seal", EnvelopeRefusal.MALFORMED)
        )
        box = check_box_id(row["box"])
        name = check_box_name(row["name"])
        secret = unb64(row["secret"], "secret", EnvelopeRefusal.MALFORMED)
    except (BoxError, EnvelopeError, TypeError) as exc:
        raise bad(str(exc)) from None
    if keys.box_id != box:
        raise bad(f"its keys give box {keys.box_id}, not the {box} it names")
    invitation, expires_at = row["invitation"], row["expires_at"]
    if not isinstance(invitation, str) or not invitation or len(invitation) > 128:
        raise bad("its invitation id is missing")
    if len(secret) != SECRET_BYTES:
        raise bad(f"its secret is not {SECRET_BYTES} bytes")
    if isinstance(expires_at, bool) or not isinstance(expires_at, int):
        raise bad("its expiry is not a time")
    code = Code(box, name, keys, invitation, secret, expires_at)
    if encode_code(code) != text.strip():
        raise bad("it is not in canonical form")
    return code


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def secret_hash(secret: bytes) -> str:
    """The SHA-256 of an invitation's secret, in hex: what the inviter stores (P2)."""
    if not isinstance(secret, bytes) or not secret:
        raise PairingError(Refusal.BAD_SECRET, "an invitation's secret is a non-empty byte string")
    return hashlib.sha256(secret).hexdigest()


def wire_due(due_at: float | None, now: float) -> bool:
    """Whether an owed pairing wire (a pair request, answer, unpair: the store's ``pair_wires`` row) is
    published now: it has a due time and that time has come. A row without one is owed nothing."""
    return due_at is not None and due_at <= now


def next_wire_due(due_ats: Iterable[float | None], now: float) -> float | None:
    """When the next owed pairing wire falls due after ``now`` (the earliest due time ahead: a copy
    sent again every ``resend`` seconds, one the server refused), None when none is: the publisher
    sleeps until then, or until a step owes a new wire (the ledger wakes it at once)."""
    return min((d for d in due_ats if d is not None and d > now), default=None)


def _with(mapping: Mapping[str, Any], items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    return freeze([*mapping.items(), *items])


def _check_id(what: str, value: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 128:
        raise PairingError(
            Refusal.BAD_ID, f"a {what} id is a non-empty string of at most 128 characters, got {value!r}"
        )
    return value


def _name(name: str, book: PairBook, *, whose: str) -> str:
    try:
        check_box_name(name)
    except BoxError as error:
        raise PairingError(Refusal.BAD_NAME, f"{whose}: {error}") from None
    try:
        return check_name_free(name, book.own_name, book.active_names())
    except BoxError as error:
        raise PairingError(Refusal.NAME_TAKEN, f"{whose}: {error} (give it one with --name)") from None


def _persist(record: Invitation | PairRequest | Pairing) -> Persist:
    if isinstance(record, Invitation):
        return Persist(STORE_INVITATION, (record.id,), record)
    if isinstance(record, PairRequest):
        return Persist(STORE_REQUEST, (record.id,), record)
    return Persist(STORE_PAIRING, (record.invitation,), record)


def _notify(event: str, key: str, **payload: Any) -> Notify:
    return Notify(topic=TOPIC, key=(key,), payload={"event": event, **payload})


def _refuse_others(
    book: PairBook, invitation_id: str, keep: str, now: float
) -> tuple[dict[str, PairRequest], list[Effect]]:
    requests = dict(book.requests)
    effects: list[Effect] = []
    for other in book.requests_on(invitation_id):
        if other.id != keep and other.state is _R.PENDING:
            refused = replace(
                other,
                state=REQUEST_TABLE.next(other.state, "invitation_used"),
                reason=str(Refusal.INVITATION_USED),
                decided_at=now,
            )
            requests[other.id] = refused
            effects.append(_persist(refused))
    return requests, effects


# --------------------------------------------------------------------------------------------------
# What a person names (P11)
# --------------------------------------------------------------------------------------------------


def pending_request(book: PairBook, who: str) -> PairRequest:
    """The one pending request ``who`` names: its id, the requester's box id or its name (P11)."""
    pending = [r for r in book.requests.values() if r.state is _R.PENDING]
    found = [r for r in pending if who in (r.id, r.box_id, r.name)]
    if not found:
        listed = ", ".join(f"{r.name} ({r.box_id})" for r in pending) or "none"
        raise PairingError(
            Refusal.UNKNOWN_REQUEST, f"no pending pair request from {who!r} on this box (pending: {listed})"
        )
    if len(found) > 1:
        raise PairingError(
            Refusal.AMBIGUOUS,
            f"{who!r} names {len(found)} pending requests: {', '.join(r.id for r in found)}; give the request id",
        )
    return found[0]


def pairing_named(book: PairBook, who: str) -> Pairing:
    """The pairing ``who`` names: its name, box id, pairing id or invitation id; of several, the latest
    ``active`` or ``requested`` one, else the latest (P11)."""
    found = [p for p in book.pairings.values() if who in (p.name, p.box_id, p.id, p.invitation)]
    if not found:
        raise PairingError(
            Refusal.UNKNOWN_PAIRING, f"no pairing with {who!r} on this box (`connectd pair list` lists them)"
        )
    live = [p for p in found if p.state in (_P.ACTIVE, _P.REQUESTED)]
    return max(live or found, key=lambda p: p.since)


def box_name(book: PairBook, box_id: str) -> str:
    """What this box calls ``box_id`` where a person reads it (``connectd messages``): the name of the
    pairing :func:`pairing_named` finds for it (the live one, else the latest), or the box id itself
    when no pairing names it."""
    try:
        return pairing_named(book, box_id).name
    except PairingError:
        return box_id


# --------------------------------------------------------------------------------------------------
# The inviter
# --------------------------------------------------------------------------------------------------


def invite(
    book: PairBook, *, invitation_id: str, secret_hash: str, now: float, expires_in: float = DEFAULT_EXPIRES,
    actor: str = OWNER,
) -> tuple[PairBook, tuple[Effect, ...]]:
    """A new open invitation (``pair invite``), living ``expires_in`` seconds (P2)."""
    _check_id("invitation", invitation_id)
    if invitation_id in book.invitations or invitation_id in book.pairings:
        raise PairingError(
            Refusal.ID_IN_USE, f"invitation id {invitation_id!r} is already in use on this box"
        )
    if (
        not isinstance(secret_hash, str)
        or len(secret_hash) != SECRET_HASH_HEX
        or secret_hash.strip("0123456789abcdef")
    ):
        raise PairingError(
            Refusal.BAD_SECRET, "an invitation keeps the SHA-256 of its secret as 64 lowercase hex digits"
        )
    if (
        isinstance(expires_in, bool)
        or not isinstance(expires_in, int | float)
        or not 0 < expires_in <= MAX_EXPIRES
    ):
        raise PairingError(
            Refusal.BAD_EXPIRY,
            f"an invitation lives more than 0 s and at most {MAX_EXPIRES:.0f} s (24 h), got {expires_in!r}",
        )
    invitation = Invitation(
        id=invitation_id, secret_hash=secret_hash, created_at=now, expires_at=now + expires_in
    )
    book = replace(book, invitations=_with(book.invitations, [(invitation_id, invitation)]))
    return book, (
        _persist(invitation),
        Audit(actor=actor, action="pair.invite", outcome="open", target=invitation_id, at=now),
    )


def revoke_invitation(
    book: PairBook, invitation_id: str, *, now: float, actor: str = OWNER
) -> tuple[PairBook, tuple[Effect, ...]]:
    """The owner withdraws an open invitation (``pair invite --revoke ID``); its pending requests are
    refused (reason ``invitation_revoked``)."""
    invitation = book.invitations.get(invitation_id)
    if invitation is None:
        raise PairingError(Refusal.UNKNOWN_INVITATION, f"no invitation {invitation_id!r} on this box")
    if invitation.state is not _I.OPEN:
        raise PairingError(
            _closed_reason(invitation), f"invitation {invitation_id!r} is {invitation.state}, not open"
        )
    revoked = replace(invitation, state=INVITATION_TABLE.next(invitation.state, "revoke"), decided_at=now)
    requests = dict(book.requests)
    effects: list[Effect] = [_persist(revoked)]
    for other in book.requests_on(invitation_id):
        if other.state is _R.PENDING:
            refused = replace(
                other,
                state=REQUEST_TABLE.next(other.state, "invitation_used"),
                reason=str(Refusal.INVITATION_REVOKED),
                decided_at=now,
            )
            requests[other.id] = refused
            effects.append(_persist(refused))
    effects.append(Audit(actor=actor, action="pair.invite", outcome="revoked", target=invitation_id, at=now))
    book = replace(
        book,
        invitations=_with(book.invitations, [(invitation_id, revoked)]),
        requests=freeze(requests.items()),
    )
    return book, tuple(effects)


def _closed_reason(invitation: Invitation) -> Refusal:
    return {
        _I.CONSUMED: Refusal.INVITATION_USED,
        _I.EXPIRED: Refusal.INVITATION_EXPIRED,
        _I.REVOKED: Refusal.INVITATION_REVOKED,
    }.get(invitation.state, Refusal.BAD_ID)


def receive_request(
    book: PairBook,
    *,
    request_id: str,
    invitation_id: str,
    keys: BoxKeys,
    name: str,
    secret: bytes,
    now: float,
) -> tuple[PairBook, tuple[Effect, ...]]:
    """Judge a received pair_request (P3): stored ``pending``, a repeat that changes nothing, or a
    :class:`PairingError`. The envelope's own checks (signature, keys giving the sender's box id,
    seal, binding) came first (:mod:`connectcore.federation.envelope`)."""
    invitation = book.invitations.get(invitation_id)
    if invitation is None:
        raise PairingError(Refusal.UNKNOWN_INVITATION, f"no invitation {invitation_id!r} on this box")
    if not isinstance(secret, bytes) or not hmac.compare_digest(secret_hash(secret), invitation.secret_hash):
        raise PairingError(
            Refusal.BAD_SECRET, f"the request's secret does not match invitation {invitation_id!r}"
        )
    box = keys.box_id
    same = repeated_request(book, invitation_id, keys)
    if same is not None and same.state in (_R.PENDING, _R.APPROVED, _R.DECLINED):
        outcome = "repeat" if same.state is _R.PENDING else f"repeat of {same.state}"
        return book, (
            Audit(
                actor=f"box:{box}",
                action="pair.request",
                outcome="duplicate",
                target=same.id,
                detail=outcome,
                at=now,
            ),
        )
    if invitation.state is _I.CONSUMED:
        raise PairingError(
            Refusal.INVITATION_USED, f"invitation {invitation_id!r} was already used by another request"
        )
    if invitation.state is _I.REVOKED:
        raise PairingError(
            Refusal.INVITATION_REVOKED, f"invitation {invitation_id!r} was revoked by its owner"
        )
    if invitation.state is _I.EXPIRED or now >= invitation.expires_at:
        raise PairingError(
            Refusal.INVITATION_EXPIRED, f"invitation {invitation_id!r} expired; ask for a new one"
        )
    if box == book.own_box:
        raise PairingError(Refusal.SELF_PAIRING, "a box cannot pair with itself")
    if book.active_with(box) is not None:
        raise PairingError(
            Refusal.ALREADY_PAIRED, f"box {box} is already paired with this box; remove that pairing first"
        )
    _check_id("request", request_id)
    if request_id in book.requests:
        raise PairingError(Refusal.ID_IN_USE, f"request id {request_id!r} is already in use on this box")
    try:
        check_box_name(name)
    except BoxError as error:
        raise PairingError(Refusal.BAD_NAME, f"the requester's name: {error}") from None
    request = PairRequest(
        id=request_id, invitation=invitation_id, box_id=box, keys=keys, name=name, received_at=now
    )
    book = replace(book, requests=_with(book.requests, [(request_id, request)]))
    return book, (
        _persist(request),
        Audit(actor=f"box:{box}", action="pair.request", outcome="pending", target=request_id, at=now),
        _notify(
            "request", request_id, box=box, name=name, fingerprint=keys.fingerprint, invitation=invitation_id
        ),
    )


def unpair_again(book: PairBook, verdict: Verdict) -> str | None:
    """The pairing whose unpair is owed again (P17) when ``verdict`` refused a signed envelope
    ``removed``: the pairing it named, with the box that signed it, removed here by this box's owner;
    else None."""
    if verdict.reason is not EnvelopeRefusal.REMOVED or verdict.pairing is None:
        return None
    box_id = verdict.actor.removeprefix("box:")
    found = next((p for p in book.pairings.values() if p.id == verdict.pairing and p.box_id == box_id), None)
    if found is None or found.state is not _P.REMOVED or found.removed_by != BY_OWNER:
        return None
    return found.id


def repeated_request(book: PairBook, invitation_id: str, keys: BoxKeys) -> PairRequest | None:
    """The request on ``invitation_id`` a pair_request with ``keys`` repeats: from the same box with the
    same keys (P3, P14); None when it repeats none."""
    return next((r for r in book.requests_on(invitation_id) if r.box_id == keys.box_id and r.keys == keys), None)


def answer_again(
    book: PairBook, invitation_id: str, keys: BoxKeys, answered: Collection[str]
) -> PairRequest | None:
    """The request whose answer a repeated pair_request (``keys`` on ``invitation_id``) is sent again
    for (P14): the one it repeats (:func:`repeated_request`), when an answer to it is kept (``answered``:
    the ids of requests whose answer the shell holds); None: nothing is sent again."""
    same = repeated_request(book, invitation_id, keys)
    return same if same is not None and same.id in answered else None


def _pending(book: PairBook, request_id: str, now: float) -> tuple[PairRequest, Invitation]:
    request = book.requests.get(request_id)
    if request is None:
        raise PairingError(Refusal.UNKNOWN_REQUEST, f"no pair request {request_id!r} on this box")
    if request.state is not _R.PENDING:
        raise PairingError(
            Refusal.NOT_PENDING, f"pair request {request_id!r} is {request.state}, not pending"
        )
    invitation = book.invitations[request.invitation]
    if invitation.state is not _I.OPEN:
        raise PairingError(_closed_reason(invitation), f"invitation {invitation.id!r} is {invitation.state}")
    if now >= invitation.expires_at:
        raise PairingError(
            Refusal.INVITATION_EXPIRED, f"invitation {invitation.id!r} expired; ask for a new one"
        )
    return request, invitation


def approve(
    book: PairBook, request_id: str, *, pairing_id: str, now: float, name: str | None = None, actor: str = OWNER
) -> tuple[PairBook, tuple[Effect, ...]]:
    """Approval 2 (P4): in one step the invitation consumed, the request approved, the other pending
    requests on it refused, the pairing active with the requester's keys pinned under ``name`` (the
    requester's own name when ``None``; P6)."""
    request, invitation = _pending(book, request_id, now)
    if book.active_with(request.box_id) is not None:
        raise PairingError(
            Refusal.ALREADY_PAIRED,
            f"box {request.box_id} is already paired with this box; remove that pairing first",
        )
    _check_id("pairing", pairing_id)
    if book.by_pairing_id(pairing_id) is not None:
        raise PairingError(Refusal.ID_IN_USE, f"pairing id {pairing_id!r} is already in use on this box")
    chosen = _name(request.name if name is None else name, book, whose=f"box {request.box_id}")
    consumed = replace(invitation, state=INVITATION_TABLE.next(invitation.state, "approve"), decided_at=now)
    approved = replace(
        request, state=REQUEST_TABLE.next(request.state, "approve"), decided_at=now, pairing=pairing_id
    )
    pairing = Pairing(
        invitation=invitation.id,
        role=Role.INVITER,
        box_id=request.box_id,
        keys=request.keys,
        name=chosen,
        state=_P.ACTIVE,
        since=now,
        id=pairing_id,
    )
    requests, refused = _refuse_others(book, invitation.id, request_id, now)
    requests[request_id] = approved
    book = replace(
        book,
        invitations=_with(book.invitations, [(invitation.id, consumed)]),
        requests=freeze(requests.items()),
        pairings=_with(book.pairings, [(invitation.id, pairing)]),
    )
    return book, (
        _persist(consumed),
        _persist(approved),
        *refused,
        _persist(pairing),
        Audit(
            actor=actor,
            action="pair.approve",
            outcome="active",
            target=pairing_id,
            detail=f"box {request.box_id} as {chosen}",
            at=now,
        ),
        _notify("active", pairing_id, box=request.box_id, name=chosen, fingerprint=request.keys.fingerprint),
    )


def decline(
    book: PairBook, request_id: str, *, now: float, actor: str = OWNER
) -> tuple[PairBook, tuple[Effect, ...]]:
    """The owner declines a request (P4): the invitation is consumed too (one invitation, one decision)."""
    request, invitation = _pending(book, request_id, now)
    consumed = replace(invitation, state=INVITATION_TABLE.next(invitation.state, "decline"), decided_at=now)
    declined = replace(request, state=REQUEST_TABLE.next(request.state, "decline"), decided_at=now)
    requests, refused = _refuse_others(book, invitation.id, request_id, now)
    requests[request_id] = declined
    book = replace(
        book,
        invitations=_with(book.invitations, [(invitation.id, consumed)]),
        requests=freeze(requests.items()),
    )
    return book, (
        _persist(consumed),
        _persist(declined),
        *refused,
        Audit(actor=actor, action="pair.decline", outcome="declined", target=request_id, at=now),
        _notify("declined", request_id, box=request.box_id),
    )


def answer(book: PairBook, request_id: str) -> Answer | None:
    """What the inviter publishes for a decided request (again on each repeat): ``pair_accept`` with the
    pairing id, ``pair_decline``, or ``None`` (undecided, refused or expired: nothing to say)."""
    request = book.requests.get(request_id)
    if request is None or request.decided_at is None:
        return None
    if request.state is _R.APPROVED:
        return Answer("pair_accept", request.box_id, request.invitation, request.pairing, request.decided_at)
    if request.state is _R.DECLINED:
        return Answer("pair_decline", request.box_id, request.invitation, None, request.decided_at)
    return None


# --------------------------------------------------------------------------------------------------
# The invitee
# --------------------------------------------------------------------------------------------------


def check_code_not_own(code: Code, own_box: str) -> Code:
    """``code``, unless it is this box's own invitation (P13: ``self_pairing``, before anything else)."""
    if code.box == own_box:
        raise PairingError(Refusal.SELF_PAIRING, "this is this box's own invitation: a box cannot pair "
                           "with itself (run `pair accept` on the other box)")
    return code


def code_repeat(book: PairBook, code: Code) -> Pairing | None:
    """The pairing ``code`` made when accepting it again is a repeat (P13): its invitation's pairing,
    with the code's box and keys, still ``requested`` or ``active``; None: not a repeat (the code is
    :func:`accept_code`'s to take or refuse)."""
    made = book.pairings.get(code.invitation)
    if (made is not None and made.box_id == code.box and made.keys == code.keys
            and made.state in (_P.REQUESTED, _P.ACTIVE)):
        return made
    return None


def accept_code(
    book: PairBook,
    *,
    invitation_id: str,
    keys: BoxKeys,
    name: str,
    expires_at: float,
    now: float,
    actor: str = OWNER,
) -> tuple[PairBook, tuple[Effect, ...]]:
    """Approval 1 (``pair accept CODE``, P1): a ``requested`` pairing with the inviter's keys pinned
    from the code, under ``name`` (the code's name, or the one the owner gave; P6). The shell then
    sends the pair_request."""
    _check_id("invitation", invitation_id)
    if invitation_id in book.pairings or invitation_id in book.invitations:
        raise PairingError(
            Refusal.INVITATION_USED, f"invitation {invitation_id!r} was already used on this box"
        )
    if now >= expires_at:
        raise PairingError(
            Refusal.INVITATION_EXPIRED, f"invitation {invitation_id!r} expired; ask for a new one"
        )
    box = keys.box_id
    if box == book.own_box:
        raise PairingError(Refusal.SELF_PAIRING, "a box cannot pair with itself")
    if book.active_with(box) is not None:
        raise PairingError(
            Refusal.ALREADY_PAIRED, f"box {box} is already paired with this box; remove that pairing first"
        )
    chosen = _name(name, book, whose=f"box {box}")
    pairing = Pairing(
        invitation=invitation_id,
        role=Role.INVITEE,
        box_id=box,
        keys=keys,
        name=chosen,
        state=PAIRING_TABLE.initial,
        since=now,
        expires_at=expires_at + ANSWER_GRACE,
    )
    book = replace(book, pairings=_with(book.pairings, [(invitation_id, pairing)]))
    return book, (
        _persist(pairing),
        Audit(
            actor=actor,
            action="pair.accept",
            outcome="requested",
            target=invitation_id,
            detail=f"box {box} as {chosen}",
            at=now,
        ),
    )


def _requested(book: PairBook, invitation_id: str) -> Pairing:
    pairing = book.pairings.get(invitation_id)
    if pairing is None or pairing.role is not Role.INVITEE:
        raise PairingError(Refusal.UNKNOWN_PAIRING, f"this box accepted no invitation {invitation_id!r}")
    return pairing


def pair_accepted(
    book: PairBook, invitation_id: str, *, pairing_id: str, now: float
) -> tuple[PairBook, tuple[Effect, ...]]:
    """The inviter's pair_accept arrived (verified with the keys pinned from the code): ``requested``
    becomes ``active`` with the inviter's pairing id. An identical repeat changes nothing."""
    pairing = _requested(book, invitation_id)
    if pairing.state is _P.ACTIVE and pairing.id == pairing_id:
        return book, ()
    if pairing.state is not _P.REQUESTED:
        raise PairingError(
            Refusal.REMOVED if pairing.state is _P.REMOVED else Refusal.NOT_REQUESTED,
            f"the pairing from invitation {invitation_id!r} is {pairing.state}: this pair_accept changes nothing",
        )
    _check_id("pairing", pairing_id)
    if book.by_pairing_id(pairing_id) is not None:
        raise PairingError(Refusal.ID_IN_USE, f"pairing id {pairing_id!r} is already in use on this box")
    if book.active_with(pairing.box_id) is not None:
        raise PairingError(
            Refusal.ALREADY_PAIRED,
            f"box {pairing.box_id} is already paired with this box; remove that pairing first",
        )
    _name(pairing.name, book, whose=f"box {pairing.box_id}")
    active = replace(
        pairing,
        state=PAIRING_TABLE.next(pairing.state, "pair_accept"),
        since=now,
        id=pairing_id,
        expires_at=None,
    )
    book = replace(book, pairings=_with(book.pairings, [(invitation_id, active)]))
    return book, (
        _persist(active),
        Audit(
            actor=f"box:{pairing.box_id}", action="pair.accept", outcome="active", target=pairing_id, at=now
        ),
        _notify(
            "active", pairing_id, box=pairing.box_id, name=pairing.name, fingerprint=pairing.keys.fingerprint
        ),
    )


def pair_declined(book: PairBook, invitation_id: str, *, now: float) -> tuple[PairBook, tuple[Effect, ...]]:
    """The inviter's pair_decline arrived: ``requested`` becomes ``declined``; a repeat changes nothing."""
    pairing = _requested(book, invitation_id)
    if pairing.state is _P.DECLINED:
        return book, ()
    if pairing.state is not _P.REQUESTED:
        raise PairingError(
            Refusal.NOT_REQUESTED,
            f"the pairing from invitation {invitation_id!r} is {pairing.state}: this pair_decline changes nothing",
        )
    declined = replace(
        pairing, state=PAIRING_TABLE.next(pairing.state, "pair_decline"), since=now, expires_at=None
    )
    book = replace(book, pairings=_with(book.pairings, [(invitation_id, declined)]))
    return book, (
        _persist(declined),
        Audit(
            actor=f"box:{pairing.box_id}",
            action="pair.decline",
            outcome="declined",
            target=invitation_id,
            at=now,
        ),
        _notify("declined", invitation_id, box=pairing.box_id, name=pairing.name),
    )


# --------------------------------------------------------------------------------------------------
# Both sides
# --------------------------------------------------------------------------------------------------


def expire(book: PairBook, *, now: float) -> tuple[PairBook, tuple[Effect, ...]]:
    """Everything past its time by ``now`` (P8): open invitations and their pending requests, an
    invitee's requested pairings. Nothing due: the same book and no effects."""
    invitations = dict(book.invitations)
    requests = dict(book.requests)
    pairings = dict(book.pairings)
    effects: list[Effect] = []
    for invitation in book.invitations.values():
        if invitation.state is _I.OPEN and now >= invitation.expires_at:
            expired = replace(
                invitation, state=INVITATION_TABLE.next(invitation.state, "expire"), decided_at=now
            )
            invitations[invitation.id] = expired
            effects.append(_persist(expired))
            for request in book.requests_on(invitation.id):
                if request.state is _R.PENDING:
                    gone = replace(
                        request,
                        state=REQUEST_TABLE.next(request.state, "expire"),
                        reason=str(Refusal.INVITATION_EXPIRED),
                        decided_at=now,
                    )
                    requests[request.id] = gone
                    effects.append(_persist(gone))
            effects.append(
                Audit(actor="connectd", action="pair.invite", outcome="expired", target=invitation.id, at=now)
            )
    for key, pairing in book.pairings.items():
        if pairing.state is _P.REQUESTED and pairing.expires_at is not None and now >= pairing.expires_at:
            expired_pairing = replace(pairing, state=PAIRING_TABLE.next(pairing.state, "expire"), since=now)
            pairings[key] = expired_pairing
            effects.append(_persist(expired_pairing))
            effects.append(
                Audit(actor="connectd", action="pair.accept", outcome="expired", target=key, at=now)
            )
            effects.append(_notify("expired", key, box=pairing.box_id, name=pairing.name))
    if not effects:
        return book, ()
    book = replace(
        book,
        invitations=freeze(invitations.items()),
        requests=freeze(requests.items()),
        pairings=freeze(pairings.items()),
    )
    return book, tuple(effects)


def pairings_ended(before: PairBook, after: PairBook) -> tuple[Pairing, ...]:
    """The pairings a step from ``before`` to ``after`` ended (P15): each whose state it changed (an
    :func:`expire` tick's expired requested pairings), as ``after`` holds them."""
    return tuple(
        p for key, p in after.pairings.items() if key in before.pairings and p.state is not before.pairings[key].state
    )


def envelope_peers(book: PairBook) -> dict[str, Peer]:
    """What the envelope judgement pins for each box this box ever paired with (P16), its pairings read
    oldest first (by ``since``): the latest pairing's keys, the active pairing (a later pairing that is
    not active leaves an earlier active one as it was) and every pairing id ever made with it."""
    peers: dict[str, Peer] = {}
    for p in sorted(book.pairings.values(), key=lambda p: p.since):
        had = peers.get(p.box_id)
        ids = (had.pairings if had else frozenset()) | ({p.id} if p.id else set())
        active = p.id if p.state is _P.ACTIVE else (had.active if had else None)
        peers[p.box_id] = Peer(p.keys, active, frozenset(ids))
    return peers


def _open_pairing(book: PairBook, invitation_id: str, ended: Refusal, why: str) -> Pairing:
    """The pairing a person's step may still change (active or requested), or :class:`PairingError`:
    ``unknown_pairing``, ``removed``, else ``ended`` for another state, its message ending in ``why``."""
    pairing = book.pairings.get(invitation_id)
    if pairing is None:
        raise PairingError(
            Refusal.UNKNOWN_PAIRING, f"no pairing from invitation {invitation_id!r} on this box"
        )
    if pairing.state not in (_P.ACTIVE, _P.REQUESTED):
        raise PairingError(
            Refusal.REMOVED if pairing.state is _P.REMOVED else ended,
            f"the pairing with box {pairing.box_id} ({pairing.name}) is {pairing.state}: {why}",
        )
    return pairing


def remove(
    book: PairBook, invitation_id: str, *, now: float, actor: str = OWNER
) -> tuple[PairBook, tuple[Effect, ...]]:
    """The owner removes a pairing (``pair remove BOX``; the pairing is found by :meth:`PairBook.named`),
    active or still requested: permanent (P7). What it owes the other box is :func:`removal_notice`'s
    (P18); sending it, and ending the messages in flight, is the shell's."""
    pairing = _open_pairing(book, invitation_id, Refusal.NOT_REQUESTED, "nothing to remove")
    removed = replace(
        pairing,
        state=PAIRING_TABLE.next(pairing.state, "remove"),
        since=now,
        removed_by=BY_OWNER,
        expires_at=None,
    )
    book = replace(book, pairings=_with(book.pairings, [(invitation_id, removed)]))
    return book, (
        _persist(removed),
        Audit(
            actor=actor,
            action="pair.remove",
            outcome="removed",
            target=pairing.id or invitation_id,
            detail=f"box {pairing.box_id} ({pairing.name})",
            at=now,
        ),
        _notify("removed", pairing.id or invitation_id, box=pairing.box_id, name=pairing.name, by=BY_OWNER),
    )


def removal_notice(pairing: Pairing) -> str | None:
    """The pairing id the unpair and the directory tombstone name that ``pairing``'s removal owes the
    other box (P18): a pairing with an id, removed by this box's owner; else None (owed nothing)."""
    if pairing.state is not _P.REMOVED or pairing.removed_by != BY_OWNER or pairing.id is None:
        return None
    return pairing.id


def tombstones_owed(book: PairBook) -> tuple[Pairing, ...]:
    """The removed pairings whose tombstone this box's directory keys hold (P18): per box, its latest
    pairing with an id (by ``since``), when :func:`removal_notice` names it."""
    latest: dict[str, Pairing] = {}
    for p in sorted(book.pairings.values(), key=lambda p: p.since):
        if p.id is not None:
            latest[p.box_id] = p
    return tuple(p for p in latest.values() if removal_notice(p) is not None)


def removed_by_peer(book: PairBook, pairing_id: str, *, now: float) -> tuple[PairBook, tuple[Effect, ...]]:
    """The other box removed the pairing (its verified unpair or tombstone): ``active`` becomes
    ``removed`` by the peer (P7). A repeat, once removed, changes nothing."""
    pairing = book.by_pairing_id(pairing_id)
    if pairing is None:
        raise PairingError(Refusal.UNKNOWN_PAIRING, f"no pairing {pairing_id!r} on this box")
    if pairing.state is _P.REMOVED:
        return book, ()
    removed = replace(
        pairing, state=PAIRING_TABLE.next(pairing.state, "removed_by_peer"), since=now, removed_by=BY_PEER
    )
    book = replace(book, pairings=_with(book.pairings, [(pairing.invitation, removed)]))
    return book, (
        _persist(removed),
        Audit(
            actor=f"box:{pairing.box_id}",
            action="pair.remove",
            outcome="removed",
            target=pairing_id,
            detail=f"by box {pairing.name}",
            at=now,
        ),
        _notify("removed", pairing_id, box=pairing.box_id, name=pairing.name, by=BY_PEER),
    )


# --------------------------------------------------------------------------------------------------
# Per-pairing settings (P12)
# --------------------------------------------------------------------------------------------------


def settings_words(settings: PairingSettings) -> tuple[str, ...]:
    """``settings`` as the ``KEY=VALUE`` words :func:`set_settings` takes, every key in order."""
    def shown(key: str) -> str:
        if key == "messages":
            return "on" if settings.messages else "off"
        if key == HISTORY_REPOS:
            return ",".join(settings.history_repos)
        return str(getattr(settings, key))

    return tuple(f"{key}={shown(key)}" for key in SETTING_KEYS)


def _repos(text: str) -> tuple[str, ...]:
    """``history_repos``' value: repository names, comma separated (none: every one taken away)."""
    names = tuple(name.strip() for name in text.split(",")) if text else ()
    for name in names:
        if not _REPO_RE.fullmatch(name):
            raise PairingError(
                Refusal.BAD_SETTING,
                f"history_repos is repository names separated by commas (letters, digits, . _ -), not {name[:40]!r}",
            )
    if len(set(names)) != len(names):
        raise PairingError(Refusal.BAD_SETTING, "history_repos names a repository twice: name each once")
    if len(names) > MAX_HISTORY_REPOS:
        raise PairingError(
            Refusal.SETTING_OUT_OF_RANGE,
            f"history_repos names {len(names)} repositories: at most {MAX_HISTORY_REPOS}",
        )
    return names


def _setting(word: str) -> tuple[str, bool | int | str | tuple[str, ...]]:
    key, equals, text = word.partition("=")
    key, text = key.strip(), text.strip()
    if not equals or not key or (not text and key != HISTORY_REPOS):
        raise PairingError(Refusal.BAD_SETTING, f"{word!r} is not KEY=VALUE (for example messages=off)")
    if key not in SETTING_KEYS:
        raise PairingError(
            Refusal.UNKNOWN_SETTING, f"no setting {key!r}: a pairing's settings are {', '.join(SETTING_KEYS)}"
        )
    if key == HISTORY_REPOS:
        return key, _repos(text)
    if key in SETTING_CHOICES:
        choices = SETTING_CHOICES[key]
        if text.lower() not in choices:
            raise PairingError(Refusal.BAD_SETTING, f"{key} is {' or '.join(choices)}, not {text[:40]!r}")
        return key, text.lower()
    if key == "messages":
        if text.lower() not in _ON | _OFF:
            raise PairingError(Refusal.BAD_SETTING, f"messages is on or off, not {text!r}")
        return key, text.lower() in _ON
    low, high = SETTING_RANGES[key]
    if not text.isascii() or not text.isdigit():
        raise PairingError(Refusal.BAD_SETTING, f"{key} is a whole number from {low} to {high}, not {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise PairingError(Refusal.SETTING_OUT_OF_RANGE, f"{key}={value} is out of range: from {low} to {high}")
    return key, value


def parse_settings(words: Iterable[str], base: PairingSettings = DEFAULT_SETTINGS) -> PairingSettings:
    """``base`` with the ``KEY=VALUE`` ``words`` set, or a :class:`PairingError` naming the first
    problem (P12): none given, not ``KEY=VALUE``, an unknown key, one given twice, a bad value or one
    out of range."""
    given: dict[str, Any] = {}
    for word in words:
        if not isinstance(word, str):
            raise PairingError(Refusal.BAD_SETTING, f"a setting is KEY=VALUE text, not {word!r}")
        key, value = _setting(word)
        if key in given:
            raise PairingError(Refusal.BAD_SETTING, f"{key} is given twice: give each setting once")
        given[key] = value
    if not given:
        raise PairingError(Refusal.BAD_SETTING, f"no setting given: KEY=VALUE, the keys {', '.join(SETTING_KEYS)}")
    return replace(base, **given)


def set_settings(
    book: PairBook, invitation_id: str, words: Iterable[str], *, now: float, actor: str = OWNER
) -> tuple[PairBook, tuple[Effect, ...]]:
    """The person sets a pairing's settings (``pair set BOX KEY=VALUE...``; the pairing is found by
    :func:`pairing_named`), all the words or none (P12). Its Persist, one Audit naming what changed
    (``from -> to``) and a Notify for the page."""
    pairing = _open_pairing(
        book, invitation_id, Refusal.NOT_ACTIVE, "its settings no longer matter (pairing again makes a new pairing)"
    )
    settings = parse_settings(words, pairing.settings)
    changed = [
        f"{old.partition('=')[0]} {old.partition('=')[2]} -> {new.partition('=')[2]}"
        for old, new in zip(settings_words(pairing.settings), settings_words(settings), strict=True)
        if old != new
    ]
    updated = replace(pairing, settings=settings)
    book = replace(book, pairings=_with(book.pairings, [(invitation_id, updated)]))
    return book, (
        _persist(updated),
        Audit(
            actor=actor,
            action="pair.set",
            outcome="set",
            target=pairing.id or invitation_id,
            detail=f"box {pairing.box_id} ({pairing.name}): " + ("; ".join(changed) or "unchanged"),
            at=now,
        ),
        _notify("settings", pairing.id or invitation_id, box=pairing.box_id, name=pairing.name,
                settings=" ".join(settings_words(settings))),
    )
