"""The ``connectd`` command line and what it needs on the person's machine.

- :mod:`connectd.cli.main`: the command line (``serve``, ``run`` and a client of the owner API);
  ``python -m connectd.cli`` runs it (``__main__``), as the ``connectd`` script does.
- :mod:`connectd.cli.doctor`: ``connectd doctor``, is this machine ready.
- :mod:`connectd.cli.facts`: what this machine looks like, for the core's advice (reads only).
- :mod:`connectd.cli.service`: ``connectd service``, the daemon as a systemd user service.
- :mod:`connectd.cli.demo`, :mod:`connectd.cli.demo_agent`: the isolated demo fleet and its stand-in
  agent.
- :mod:`connectd.cli.safetext`: supplied text made safe to show (data, never terminal control).
"""
