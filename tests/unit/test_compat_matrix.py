"""The compatibility matrix (docs/compatibility.md, written by scripts/compat.py from
docs/compatibility.json) and connectd's verified releases agree: ``VERIFIED`` lists exactly the
releases the matrix verified, and the table in the document is the one the results render to."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from connectd import verified as compat

ROOT = Path(__file__).resolve().parents[2]


def _compat_script() -> Any:
    spec = importlib.util.spec_from_file_location("compat_script", ROOT / "scripts" / "compat.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SCRIPT = _compat_script()
RESULTS = json.loads((ROOT / "docs" / "compatibility.json").read_text())


def test_verified_is_exactly_what_the_matrix_verified() -> None:
    assert set(compat.VERIFIED) == set(SCRIPT.NAMES), "every harness in the matrix, and only those"
    for name in SCRIPT.NAMES:
        passed = {key.split(" ", 1)[1] for key, entry in RESULTS.items()
                  if key.startswith(name + " ") and SCRIPT.verdict(entry)}
        assert set(compat.VERIFIED[name][1]) == passed, name
        listed = [compat.version_tuple(v) for v in compat.VERIFIED[name][1]]
        assert listed == sorted(listed), "newest last: doctor recommends the last one"


def test_the_document_shows_the_rendered_results() -> None:
    doc = (ROOT / "docs" / "compatibility.md").read_text()
    assert SCRIPT.START in doc and SCRIPT.END in doc
    table = doc[doc.index(SCRIPT.START) + len(SCRIPT.START):doc.index(SCRIPT.END)].strip()
    assert table == SCRIPT.render(RESULTS)


def test_a_release_with_a_false_ready_screen_or_a_failed_run_is_not_verified() -> None:
    good = {"live": {"passed": True}, "capture": {"completed": True, "screens": 19, "false_ready": 0}}
    assert SCRIPT.verdict(good)
    assert not SCRIPT.verdict({**good, "capture": {**good["capture"], "false_ready": 1}})
    assert not SCRIPT.verdict({**good, "live": {"passed": False, "reason": "step 'x': timed out"}})
    assert not SCRIPT.verdict({**good, "capture": {**good["capture"], "completed": False}})


def test_a_failed_run_names_its_step_and_how_connectd_read_the_agent() -> None:
    output = ("E   tests.support.live.StepTimeout: step 'launch A': timed out waiting for b idle\n"
              "E               %0: harness=shell activity=unknown composer=absent\n"
              "E               %1: harness=claude activity=idle composer=empty\n"
              "E               %2: harness=codex activity=unknown composer=draft\n")
    assert SCRIPT.why(output) == ("step 'launch A': timed out waiting for b idle; "
                                  "connectd read %2: harness=codex activity=unknown composer=draft")
