"""The agent calls the MCP endpoint makes: who am I, the fleet, history, messages.

Every call passes the core's gate first (:func:`connectcore.reads.gate`: a live token and the call's
scope) before anything is looked up, and gets one audit record when its outcome is known
(:meth:`AgentCalls.call`). The rules of what a read shows are the core's (:mod:`connectcore.reads`);
the calls look things up and shape the answers, which mark other agents' text as data with its
source named.

:class:`AgentCalls` is the one object the edges hold, made of the gate
(:mod:`connectd.agents.call_gate`) and one part per tool group, as the MCP endpoint registers them:
:mod:`connectd.agents.directory_calls`, :mod:`connectd.agents.history_calls`,
:mod:`connectd.agents.message_calls`.
"""

from __future__ import annotations

from connectd.agents.directory_calls import SCREEN_TAIL_LINES as SCREEN_TAIL_LINES
from connectd.agents.directory_calls import DirectoryCalls
from connectd.agents.history_calls import HistoryCalls
from connectd.agents.message_calls import MessageCalls
from connectd.agents.message_calls import message_view as message_view


class AgentCalls(DirectoryCalls, HistoryCalls, MessageCalls):
    """Every agent call: :meth:`~connectd.agents.call_gate.GatedCalls.call` (the gate and the audit
    record) and the three tool groups."""
