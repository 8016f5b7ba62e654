"""The hub's step: rules the fourth mutation run (stop 34) found unpinned. Each test names the mutants
of connectcore.hub (its ``__init__``) it kills (docs/survivors/hub.md has the verdicts)."""

from __future__ import annotations

from connectcore import hub as H
from connectcore.federation import envelope as E
from connectcore.federation import outbox as O
from tests.unit.hubkit import World, actor
from tests.unit.test_hub_federation import NOW, PAIRING, A, B, receipt_for, submit


def test_a_message_to_another_box_that_ends_is_audited_at_the_step_s_time() -> None:
    """The final ``send_message`` record of a message to another box carries the time of the step
    that made it final (the receipt's), as every other record does. Kills step mutmut_29
    (``finals_audited(..., event.now)`` -> ``None``)."""
    w = World(hub=H.Hub(outbox=O.Outbox(own=A)), now=NOW)
    me = w.launch("me")
    submit(w, me)
    assert w.hub.outbox is not None
    (row,) = w.hub.outbox.rows.values()
    w.now += 5.0
    inner = E.ReceiptInner(E.Routing(E.Kind.RECEIPT, B, A, pairing=PAIRING), row.identity, row.digest, "delivered",
                           "typed", w.now, ("agent:codex:x", "%4"), None)
    effects = receipt_for(w, inner)
    finals = [(e.outcome, e.at) for e in effects
              if isinstance(e, H.Audit) and e.actor == actor(w, me) and e.action == "send_message"]
    assert finals == [("delivered", w.now)]
