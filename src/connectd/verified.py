"""The harness releases and the tmux version connect is verified on (docs/compatibility.md).

The verified releases and the rule for agents on any other are the core's
(:mod:`connectcore.releases`); this module re-exports what ``connectd doctor`` needs and keeps the
tmux versions. The test suite's pins (``tests/support/harnesses.py``) must be among the verified
releases (a unit test checks it).
"""

from __future__ import annotations

from connectcore.releases import VERIFIED, is_verified, parse_version, version_tuple

__all__ = ["TMUX_MINIMUM", "TMUX_TESTED", "VERIFIED", "is_verified", "parse_version", "version_tuple"]

#: The oldest tmux connectd supports (control-mode client flags such as ``ignore-size``) and the one
#: every test ran on.
TMUX_MINIMUM = (3, 2)
TMUX_TESTED = "3.3a"
