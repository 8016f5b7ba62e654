"""Box identity: box ids and fingerprints from public keys, box names, and targets qualified by a box.

Rules (docs/federation.md, "Words", "Box identity", "The rules on each box"):

- A **box** holds two public keys of 32 bytes each: Ed25519 to sign, X25519 to seal. One digest names
  it: ``D = SHA-256(b"connect-box-v1" || sign_public || seal_public)``. The **box id** is the first
  10 bytes of ``D`` in lowercase base32 without padding (16 characters of ``[a-z2-7]``, a valid NATS
  subject token); the **fingerprint** is the first 16 bytes of ``D`` in hex, in eight groups of four
  (``3f9a 12c0 77de 0b41 9c2e 5a18 d003 e6f7``), what a person compares; the **short fingerprint**
  (the first eight hex digits) is what a provenance line carries. New keys are a new box.
- A **box name** is ``[a-z0-9-]{1,32}``, the owner's choice. It must be unique among this box's own
  name and the names of its active pairings (:func:`check_name_free`).
- A **target is qualified** by its last ``@NAME`` when ``NAME`` is this box's own name or the name of
  an active pairing: ``%4@51d7a9c03e6f2b18@laptop``, ``pr:12@laptop``, ``title:login fix@laptop``,
  ``control@laptop``. An unqualified address ``%N@<token>`` means this box, as today. An address
  qualified by a valid name that is no active pairing is refused ``unknown_box``.
- An **unqualified handle** is resolved on this box and in every paired box's directory: one that
  names panes on more than one box is refused ``ambiguous``, with the count per box and the qualified
  forms, never guessed; one that names no pane anywhere is ``no_pane``. A handle that could be read
  both ways (``title:login fix@laptop`` is the title ``login fix`` on laptop, or a title ending in
  ``@laptop``) is ``ambiguous`` when its unqualified reading names any pane; else it is the qualified
  one. The sending box only chooses the box: the recipient box resolves the target itself.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from connectcore import directory as D
from connectcore._machine import ConnectError

KEY_BYTES = 32
BOX_ID_BYTES = 10
FINGERPRINT_BYTES = 16
DIGEST_TAG = b"connect-box-v1"

BOX_ID_RE = re.compile(r"[a-z2-7]{16}")
BOX_NAME_RE = re.compile(r"[a-z0-9-]{1,32}")


class BoxError(ConnectError):
    """A malformed key, box id or box name, or a box name that names no box here. ``reason`` is one
    of ``bad_key``, ``bad_box_id``, ``bad_box_name``, ``name_taken``, ``unknown_box``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _digest(sign_public: bytes, seal_public: bytes) -> bytes:
    for what, key in (("signing", sign_public), ("sealing", seal_public)):
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            got = f"{len(key)} bytes" if isinstance(key, bytes) else type(key).__name__
            raise BoxError("bad_key", f"a box's {what} public key is {KEY_BYTES} bytes, got {got}")
    return hashlib.sha256(DIGEST_TAG + sign_public + seal_public).digest()


@dataclass(frozen=True)
class BoxKeys:
    """A box's two public keys, as pinned by its peers (never a secret: those stay in the shell)."""

    sign: bytes  # Ed25519 public key
    seal: bytes  # X25519 public key

    def __post_init__(self) -> None:
        _digest(self.sign, self.seal)  # checks both lengths, loudly

    @property
    def box_id(self) -> str:
        return box_id(self.sign, self.seal)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.sign, self.seal)


def box_id(sign_public: bytes, seal_public: bytes) -> str:
    """The box id the two public keys give: 16 lowercase base32 characters."""
    raw = _digest(sign_public, seal_public)[:BOX_ID_BYTES]
    return base64.b32encode(raw).decode("ascii").lower()


def fingerprint(sign_public: bytes, seal_public: bytes) -> str:
    """The fingerprint a person compares: 32 hex digits in groups of four."""
    hexed = _digest(sign_public, seal_public)[:FINGERPRINT_BYTES].hex()
    return " ".join(hexed[i : i + 4] for i in range(0, len(hexed), 4))


def short_fingerprint(sign_public: bytes, seal_public: bytes) -> str:
    """The first eight hex digits of the fingerprint (a provenance line's)."""
    return fingerprint(sign_public, seal_public).replace(" ", "")[:8]


def check_box_id(value: str) -> str:
    """``value`` if it is a box id, else :class:`BoxError` (``bad_box_id``) saying why."""
    if not isinstance(value, str) or not BOX_ID_RE.fullmatch(value):
        raise BoxError("bad_box_id", f"a box id is 16 characters of a-z and 2-7, got {value!r}")
    return value


def check_box_name(value: str) -> str:
    """``value`` if it is a box name, else :class:`BoxError` (``bad_box_name``) saying why."""
    if not isinstance(value, str) or not BOX_NAME_RE.fullmatch(value):
        raise BoxError(
            "bad_box_name",
            f"a box name is 1 to 32 characters of a-z, 0-9 and -, got {str(value)[:40]!r}",
        )
    return value


def check_name_free(name: str, own_name: str, paired_names: Collection[str]) -> str:
    """``name`` if a new pairing may take it: a valid name that is neither this box's own name nor
    that of an active pairing, else :class:`BoxError` (``name_taken``: choose another)."""
    check_box_name(name)
    if name == own_name or name in paired_names:
        whose = "this box's own name" if name == own_name else "the name of an active pairing"
        raise BoxError("name_taken", f"box name {name!r} is {whose}: choose another name for this box")
    return name


# --------------------------------------------------------------------------------------------------
# Qualified targets
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """A target and the box that resolves it (``box`` is a pairing's box name; ``None`` is this box),
    and whether the text named the box (``qualified``) or the directories chose it."""

    target: D.Target
    box: str | None
    qualified: bool = False

    def __str__(self) -> str:
        return str(self.target) if self.box is None else f"{self.target}@{self.box}"


def readings(text: str, *, own_name: str, paired_names: Collection[str]) -> tuple[Placed, ...]:
    """Every way ``text`` can be read as a target: qualified by its last ``@NAME`` (this box's own
    name or an active pairing's), and unqualified (the whole text, on this box and the paired boxes'
    directories, ``box`` None). One or two readings; none is :class:`directory.TargetError`
    (``bad_target``) or :class:`BoxError` (``unknown_box``) saying why."""
    if not isinstance(text, str):
        raise D.TargetError(D.TargetRefusal.BAD_TARGET, f"a target is a string, got {type(text).__name__}")
    stripped = text.strip()
    found: list[Placed] = []
    rest, at, name = stripped.rpartition("@")
    if at and (name == own_name or name in paired_names):
        try:
            target = D.parse_target(rest)
        except D.TargetError:
            pass
        else:
            found.append(Placed(target, None if name == own_name else name, qualified=True))
    try:
        whole = D.parse_target(stripped)
    except D.TargetError as error:
        if found:
            return tuple(found)
        if at and stripped.startswith("%") and BOX_NAME_RE.fullmatch(name) and D.ADDRESS_RE.fullmatch(rest):
            raise BoxError(
                "unknown_box", f"{stripped}: no active pairing is named {name!r} (connectd pair list)"
            ) from None
        raise error
    found.append(Placed(whole, None))
    return tuple(found)


def place(
    text: str,
    *,
    own_name: str,
    paired_names: Collection[str],
    matches: Mapping[str, Mapping[str | None, int]],
) -> Placed:
    """The one box ``text`` goes to, by the ambiguity rule above, or :class:`directory.TargetError`
    (``ambiguous`` or ``no_pane``) saying why.

    ``matches`` is what the directories hold: for each unqualified handle of :func:`readings` (its
    wire form), how many panes it names per box (``None``: this box; a name: that pairing's directory).
    A qualified reading needs none: its box resolves it.
    """
    found = readings(text, own_name=own_name, paired_names=paired_names)
    qualified = [r for r in found if r.qualified]
    unqualified = [r for r in found if not r.qualified]
    if qualified and unqualified:
        both = unqualified[0]
        per_box = _named(both, matches)
        if per_box:
            raise D.TargetError(
                D.TargetRefusal.AMBIGUOUS,
                f"{text.strip()} can be read two ways: {qualified[0]} or the handle {both.target}, which "
                f"names panes on {_counts(per_box)}; address the pane as %N@<token>@<box> instead",
                candidates=sum(per_box.values()),
            )
        return qualified[0]
    if qualified:
        return qualified[0]
    only = unqualified[0]
    if isinstance(only.target, D.PaneAddress):
        return only
    per_box = _named(only, matches)
    if not per_box:
        raise D.TargetError(D.TargetRefusal.NO_PANE, f"no live pane on any box matches {only.target}")
    if len(per_box) > 1:
        forms = ", ".join(f"{only.target}@{box or own_name}" for box in _ordered(per_box))
        raise D.TargetError(
            D.TargetRefusal.AMBIGUOUS,
            f"{only.target} names panes on {len(per_box)} boxes: {_counts(per_box)}; qualify it: {forms}",
            candidates=sum(per_box.values()),
        )
    (box,) = per_box
    return Placed(only.target, box)


def _named(reading: Placed, matches: Mapping[str, Mapping[str | None, int]]) -> dict[str | None, int]:
    counts = matches.get(str(reading.target), {})
    return {box: n for box, n in counts.items() if n > 0}


def _ordered(per_box: Mapping[str | None, int]) -> Sequence[str | None]:
    return sorted(per_box, key=lambda box: (box is not None, box or ""))


def _counts(per_box: Mapping[str | None, int]) -> str:
    return ", ".join(
        f"{'this box' if box is None else box} ({per_box[box]})" for box in _ordered(per_box)
    )
