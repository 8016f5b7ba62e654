"""The control role's shell: control's act tools as the MCP endpoint calls them, and its acts on real
panes (the core decides each one, :mod:`connectcore.hub.acts`).

- :mod:`connectd.control.act_calls`: each act tool looks up what the core needs and steps
  ``ActProposed``.
- :mod:`connectd.control.acts`: the guard under the send lock, then the one effect that executes an act.
"""
