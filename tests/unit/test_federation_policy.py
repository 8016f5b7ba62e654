"""A box's ``[federation]`` settings (connectcore.federation.policy, S1-S4): what the owner may set, and
each refusal naming its key and why, with nothing used."""

from __future__ import annotations

import pytest

from connectcore.federation import outbox as O
from connectcore.federation import policy as F
from connectcore.federation.envelope import RETENTION


def test_no_table_is_the_defaults_the_outbox_and_inbox_already_use() -> None:
    assert F.parse({}) == F.DEFAULT == F.FederationPolicy(O.DEFAULT_SETTINGS, RETENTION)


def test_every_key_sets_its_own_bound_and_nothing_else() -> None:
    parsed = F.parse({"skew_bound": 60, "final_grace": 120.5, "first_retry": 2, "max_retry": 30, "jitter": 0,
                      "live_within": 90, "accepted_poll": 45, "retention": 7200})
    assert parsed.outbox == O.Settings(id_ttl=O.DEFAULT_SETTINGS.id_ttl, skew_bound=60.0, final_grace=120.5,
                                       first_retry=2.0, max_retry=30.0, jitter=0.0, live_within=90.0,
                                       accepted_poll=45.0)
    assert parsed.retention == 7200.0
    assert F.parse({"accepted_poll": 45}).outbox == O.Settings(accepted_poll=45.0)


@pytest.mark.parametrize(
    ("table", "key", "needle"),
    [
        ({"id_ttl": 60}, "id_ttl", "unknown setting 'id_ttl'"),  # S1: the id's hour is not a setting
        ({"skew": 60}, "skew", "unknown setting 'skew' (known: skew_bound,"),
        ({"skew_bound": "5m"}, "skew_bound", "skew_bound must be a number of seconds, not '5m'"),  # S2
        ({"live_within": True}, "live_within", "live_within must be a number of seconds"),
        ({"final_grace": 0}, "final_grace", "final_grace must be positive, not 0"),
        ({"accepted_poll": -1}, "accepted_poll", "accepted_poll must be positive"),
        ({"jitter": 1}, "jitter", "jitter must be a fraction from 0 to below 1, not 1"),
        ({"jitter": -0.1}, "jitter", "jitter must be a fraction"),
        ({"first_retry": 90}, "first_retry", "first_retry (90 s) must not exceed max_retry (60 s)"),  # S3
        ({"max_retry": 2}, "max_retry", "first_retry (5 s) must not exceed max_retry (2 s)"),
        ({"retention": 3600}, "retention", "retention (3600 s) must be at least the id's hour + skew_bound"),  # S4
        ({"retention": 4499, "final_grace": 600}, "retention", "(4500 s)"),
        ({"retention": 5000, "skew_bound": 1200}, "retention", "(5400 s)"),
    ],
)
def test_a_setting_that_breaks_a_rule_is_refused_naming_it(table: dict[str, object], key: str, needle: str) -> None:
    with pytest.raises(F.PolicyRefused) as err:
        F.parse(table)
    assert err.value.key == key and needle in str(err.value), str(err.value)


def test_retention_exactly_the_sender_s_window_is_enough() -> None:
    window = O.DEFAULT_SETTINGS.id_ttl + O.DEFAULT_SETTINGS.skew_bound + O.DEFAULT_SETTINGS.final_grace
    assert F.parse({"retention": window}).retention == window


def test_the_bounds_are_exact_one_second_and_a_first_retry_equal_to_the_max_are_settings() -> None:
    """S2 refuses only what is not positive, so one second (or 0.5) is a setting; S3 refuses a first
    retry *above* the longest, so equal is allowed (kills the fourth run's ``parse`` 28, ``<= 0`` ->
    ``<= 1``, and 46, ``>`` -> ``>=``)."""
    assert F.parse({"first_retry": 1}).outbox.first_retry == 1.0
    assert F.parse({"final_grace": 0.5}).outbox.final_grace == 0.5
    assert F.parse({"first_retry": 60, "max_retry": 60}).outbox == O.Settings(first_retry=60.0, max_retry=60.0)
