"""The policy file: a cap and limits; every malformed file is refused with its line and reason."""

from __future__ import annotations

import pytest

from connectcore.grants import Preset
from connectd.daemon.config import PolicyError, load_policy, parse_policy


def test_empty_policy_is_the_defaults(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert load_policy(tmp_path / "missing.toml").cap is Preset.COLLABORATE
    assert parse_policy("").limits.hop_limit == 4


def test_cap_and_limits() -> None:
    policy = parse_policy('cap = "observe"\n[limits]\nhop_limit = 2\ncard_ttl = 60.5\n')
    assert policy.cap is Preset.OBSERVE and policy.limits.hop_limit == 2 and policy.limits.card_ttl == 60.5


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('cap = "everything"\n', "policy.toml:1: cap must be off, observe or collaborate"),
        ("\n\nsurprise = 1\n", "policy.toml:3: unknown setting 'surprise'"),
        ("[limits]\nhop_limt = 3\n", "policy.toml:2: unknown limit 'hop_limt'"),
        ("[limits]\nhop_limit = 2.5\n", "policy.toml:2: hop_limit must be a whole number"),
        ("[limits]\nhop_limit = -1\n", "hop_limit must be positive"),
        ('[limits]\nid_ttl = "1h"\n', "id_ttl must be a number"),
        ("limits = 3\n", "limits must be a table"),
        ("cap = \n", "policy.toml: "),
    ],
)
def test_malformed_policy_is_refused_with_line_and_reason(text: str, needle: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert needle in str(err.value)


def test_a_federation_table_sets_the_box_s_federation_bounds() -> None:
    policy = parse_policy("[limits]\nhop_limit = 2\n\n[federation]\naccepted_poll = 120\nretention = 86400\n")
    assert policy.federation.outbox.accepted_poll == 120.0 and policy.federation.retention == 86400.0
    assert policy.limits.hop_limit == 2 and parse_policy("").federation.outbox.accepted_poll == 300.0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[federation]\n\nid_ttl = 60\n", "policy.toml:3: unknown setting 'id_ttl'"),
        ("[federation]\nskew_bound = 60\nretention = 100\n", "policy.toml:3: retention (100 s) must be at least"),
        ("federation = 3\n", "policy.toml:1: federation must be a table"),
    ],
)
def test_a_malformed_federation_table_is_refused_with_line_and_reason(text: str, needle: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text)
    assert needle in str(err.value), str(err.value)
