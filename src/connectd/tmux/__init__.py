"""The panes: everything the daemon reads from and does to tmux and the processes in its panes.

- :mod:`connectd.tmux.adapter`: the tmux adapter (list, capture, paste, options, respawn, launch), one
  checked ``tmux`` subprocess per call.
- :mod:`connectd.tmux.control_mode`: which panes produced output, one control-mode client per session.
- :mod:`connectd.tmux.watcher`: which panes live, what they show, which agent session each holds.
- :mod:`connectd.tmux.session_binding`: the watcher's session evidence (Codex's rollout, Claude's
  registry) and each binding told to the store and the core.
- :mod:`connectd.tmux.pane_releases`: the watcher's record of each agent pane's release (banner,
  ``--version``, kept by incarnation).
- :mod:`connectd.tmux.procfs`: Linux ``/proc`` (start times, ancestry, children, open files).
- :mod:`connectd.tmux.release_probe`: an agent's release from ``<executable> --version``.
- :mod:`connectd.tmux.repo_facts`: a pane's repository, branch, session title and PR links.
"""
