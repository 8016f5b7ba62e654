"""A box's federation policy: the bounds its owner may set (``[federation]`` in policy.toml;
docs/federation.md, "Settings and defaults"), and the rules a set of them must keep.

Rules (:func:`parse`; a refusal is :class:`PolicyRefused` naming the key and why, and nothing is used):

S1  **Known keys only.** ``skew_bound``, ``final_grace``, ``first_retry``, ``max_retry``, ``jitter``,
    ``live_within``, ``accepted_poll`` (the outbox's, :class:`connectcore.federation.outbox.Settings`) and
    ``retention`` (the inbox's). The id's hour is not a setting: both boxes must agree on it, and it is
    the same hour a local message id lives.
S2  **Numbers, in seconds, positive.** ``jitter`` is a fraction: at least 0, below 1.
S3  **The first new attempt is no later than the longest wait** (``first_retry <= max_retry``).
S4  **Identities are held as long as their sender may still send them.** ``retention`` is at least the
    sender's window for an envelope (the id's hour + ``skew_bound`` + ``final_grace``): a shorter one
    would refuse a sender's own republished copy as a replay (``stale``) before its deadline, and the
    message would end ``unconfirmed`` though it was delivered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from connectcore._machine import ConnectError
from connectcore.federation import outbox as O
from connectcore.federation.envelope import RETENTION

OUTBOX_KEYS = ("skew_bound", "final_grace", "first_retry", "max_retry", "jitter", "live_within", "accepted_poll")
KEYS = (*OUTBOX_KEYS, "retention")


class PolicyRefused(ConnectError):
    """A ``[federation]`` table that breaks a rule above: ``key`` names the setting, ``str()`` why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class FederationPolicy:
    """What a federated box runs with: the outbox's bounds and the inbox's retention."""

    outbox: O.Settings = O.DEFAULT_SETTINGS
    retention: float = RETENTION


DEFAULT = FederationPolicy()


def parse(table: Mapping[str, object]) -> FederationPolicy:
    """The settings ``table`` sets over the defaults, or :class:`PolicyRefused` (S1-S4)."""
    for key in table:  # S1
        if key not in KEYS:
            raise PolicyRefused(key, f"unknown setting {key!r} (known: {', '.join(KEYS)})")
    values: dict[str, float] = {}
    for key, value in table.items():  # S2
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PolicyRefused(key, f"{key} must be a number of seconds, not {value!r}")
        if key == "jitter":
            if not 0 <= value < 1:
                raise PolicyRefused(key, f"jitter must be a fraction from 0 to below 1, not {value!r}")
        elif value <= 0:
            raise PolicyRefused(key, f"{key} must be positive, not {value!r}")
        values[key] = float(value)
    retention = values.pop("retention", RETENTION)
    outbox = dataclasses.replace(O.DEFAULT_SETTINGS, **values)
    if outbox.first_retry > outbox.max_retry:  # S3
        key = "first_retry" if "first_retry" in values else "max_retry"
        raise PolicyRefused(key, f"first_retry ({outbox.first_retry:g} s) must not exceed max_retry "
                                   f"({outbox.max_retry:g} s)")
    window = outbox.id_ttl + outbox.skew_bound + outbox.final_grace  # S4
    if retention < window:
        raise PolicyRefused("retention", f"retention ({retention:g} s) must be at least the id's hour + skew_bound "
                                           f"+ final_grace ({window:g} s): a sender may send an identity that long")
    return FederationPolicy(outbox, retention)
