"""The daemon's running core: the task group, the parts it builds, and the one path every step takes.

- :mod:`connectd.daemon.app`: the daemon, one task group for its whole life.
- :mod:`connectd.daemon.parts`: the composition root (the engine builds the parts; it forwards nothing).
- :mod:`connectd.daemon.runner`: the one place that steps the core, with group commit.
- :mod:`connectd.daemon.interpreter`: the one place that executes the core's other effects, in order.
- :mod:`connectd.daemon.supervisor`: one way to start a task, and the failure policy of every kind.
- :mod:`connectd.daemon.clock`, :mod:`connectd.daemon.ids`: the daemon's clock, fresh ids and tokens.
- :mod:`connectd.daemon.config`: the optional policy file (``policy.toml``).
"""
