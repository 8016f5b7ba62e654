"""scripts/mutation_score.py's resumable runs: what a saved result file says is left to check."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import mutation_score  # noqa: E402


def test_a_saved_result_file_resumes_with_its_unchecked_names_only() -> None:
    saved = (
        "connectd.daemon.runner.xǁCoreRunnerǁstep__mutmut_1: killed\n"
        "    connectd.daemon.runner.xǁCoreRunnerǁstep__mutmut_2: not checked\n"
        "connectd.daemon.runner.xǁCoreRunnerǁstep__mutmut_3: survived\n"
        "connectd.tmux.captures.xǁCaptureScheduleǁsweep__mutmut_4: not checked\n"
    )
    assert mutation_score.unchecked(saved) == [
        "connectd.daemon.runner.xǁCoreRunnerǁstep__mutmut_2",
        "connectd.tmux.captures.xǁCaptureScheduleǁsweep__mutmut_4",
    ]


def test_an_option_s_value_is_taken_out_of_the_arguments() -> None:
    argv = ["--shell", "--resume", "saved.txt", "--max-children", "2"]
    assert mutation_score._option(argv, "--resume") == "saved.txt"
    assert argv == ["--shell", "--max-children", "2"]
    assert mutation_score._option(argv, "--save") is None
