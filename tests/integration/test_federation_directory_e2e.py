"""Two real daemons share their directories over a real NATS server (docs/federation.md, build order
slice 7; the setup is test_federation_pairing_e2e's: each ``connectd serve`` with its own data
directory, HOME and tmux server, one ``nats-server`` with exactly the documented permissions per box).
Paired by the real CLI, box A's agent granted ``reachable`` appears in ``list_agents`` of B's agent,
with its box (the name B paired it under, its id, A's short fingerprint), its address qualified by
that name and the entry's age; A's agent without ``reachable`` does not; and the address B lists
reaches A's agent (its card on A)."""

from __future__ import annotations

from typing import Any

import anyio

from tests.integration.test_daemon_e2e import send
from tests.integration.test_federation_messages_e2e import _pair
from tests.integration.test_federation_pairing_e2e import Box, boxes  # noqa: F401 - the fixture
from tests.support.daemon import AgentHandle, call, mcp_agent, wait_for
from tests.support.nats import NatsServer


def _listed(box: Box, agent: AgentHandle) -> list[dict[str, Any]]:
    async def ask() -> Any:
        async with mcp_agent(box.daemon.mcp_url, agent.token or "") as client:
            return await call(client, "list_agents")

    err, payload = anyio.run(ask)
    assert not err, payload
    return list(payload["data"])


def test_box_b_lists_box_a_s_reachable_agent_with_its_box_and_age_and_not_the_others(
    boxes: tuple[Box, Box, NatsServer],  # noqa: F811
) -> None:
    a, b, _server = boxes
    _pair(a, b)
    shown = a.daemon.launch("shown")  # collaborate: reachable
    hidden = a.daemon.launch("hidden", connect="observe")  # read and history only
    reader = b.daemon.launch("reader")
    for box, agent in ((a, shown), (a, hidden), (b, reader)):
        box.daemon.wait_ready(agent)

    def remote() -> list[dict[str, Any]]:
        return [x for x in _listed(b, reader) if x.get("remote")]

    (agent,) = wait_for(remote, 30, "A's reachable agent in B's list_agents")
    assert agent["address"] == f"{shown.address}@laptop" and agent["pane"] == shown.pane
    fingerprint = a.local.keys.fingerprint.replace(" ", "")[:8]
    assert agent["box"] == {"name": "laptop", "id": a.local.box_id, "fingerprint": fingerprint}
    assert agent["freshness"] == "fresh" and agent["stale"] is False and 0 <= agent["age"] < 60
    assert agent["reachable"] is True and "cwd" not in agent
    assert hidden.address not in {x["address"].removesuffix("@laptop") for x in remote()}
    assert hidden.pane not in {x["pane"] for x in remote()}
    # B's own agents are listed as before, unqualified
    assert reader.address in {x["address"] for x in _listed(b, reader)}

    # the address B lists reaches A's agent: a card on A names it
    err, sent = anyio.run(send, b.daemon, reader, agent["address"], "hello from devbox", "m-d")
    assert not err and sent["outcome"] == "queued", sent  # type: ignore[index]
    card = a.daemon.wait_card(30)
    assert card["recipient_pane"] == shown.pane
    for box in (a, b):
        assert not [r for r in box.audit("failed") if r["action"] == "task.bus"], box.daemon.log_text()
