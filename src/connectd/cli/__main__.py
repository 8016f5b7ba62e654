"""``python -m connectd.cli``: the ``connectd`` command, run by this interpreter (the systemd unit, the
launchers and the advice printed to the person run it so)."""

import sys

from connectd.cli.main import main

sys.exit(main())
