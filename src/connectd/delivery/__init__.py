"""Delivery on real panes: where a target names, and the guard, typing and confirmation of a message.

- :mod:`connectd.delivery.guard`: delivery I/O, the guard the core asks for, the typing and its
  confirmation.
- :mod:`connectd.delivery.targets`: where a target names, for every agent call and the guard (the
  directory's rule, and the running control for the ``control`` handle).
"""
