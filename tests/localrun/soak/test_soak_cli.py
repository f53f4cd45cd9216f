"""`python -m localrun.soak`'s refusals: a bad option is answered before anything starts."""

from __future__ import annotations

import pytest

from localrun.soak.__main__ import EXIT_CANNOT_RUN, main, parse_args


def test_replaying_a_run_the_soak_does_not_have_is_refused_naming_the_range(capsys):
    assert main(["--runs", "5", "--only", "5"]) == EXIT_CANNOT_RUN
    assert "--only 5 is not a run of --runs 5 (0..4)" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--instances", "1"], ["--only", "-1"]])
def test_a_count_below_its_minimum_is_refused(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert "must be at least" in capsys.readouterr().err


def test_the_forced_run_fault_is_on_unless_turned_off():
    assert parse_args([]).forced is True
    assert parse_args(["--no-forced"]).forced is False
