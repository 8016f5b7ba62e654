"""The agents' life on real tmux: launching them, binding their sessions, restarting them to connect,
restoring a lost fleet, and the calls they make.

- :mod:`connectd.agents.launch`: a structured launcher in a new tmux window, endpoint injected.
- :mod:`connectd.agents.launch_here`: ``connectd launch --here``, in the person's own pane.
- :mod:`connectd.agents.opencode_session`: an OpenCode launch bound to its session through its server.
- :mod:`connectd.agents.restart_to_connect`: the restarts the hub holds, carried out on tmux.
- :mod:`connectd.agents.restore_fleet`: "restore N sessions?" after a lost tmux server or a reboot.
- :mod:`connectd.agents.agent_calls`: the agent calls the MCP endpoint makes.
  Its parts: :mod:`connectd.agents.call_gate` (the gate and the one audit record every call passes),
  :mod:`connectd.agents.directory_calls` (the fleet directory and its view),
  :mod:`connectd.agents.history_calls` (past sessions), :mod:`connectd.agents.message_calls` (messages).
"""
