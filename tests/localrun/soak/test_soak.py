"""The soak end to end, small: the real function on several instances, the Firestore
emulator, every fault kind but the forced run (whose ScheduleTime is a minute ahead), and a
ledger broken on purpose, which the independent count must catch."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from infra.settings.loading import load_stack_settings
from localrun.demo import DEMO_STACKS_DIR
from localrun.emulator import free_loopback_port
from localrun.function_server import FunctionServer
from localrun.soak.__main__ import SOAK_STACK
from localrun.soak.checker import Outcome
from localrun.soak.plan import RunPlan, SoakFault, plan_soak
from localrun.soak.report import build_report, failure_lines
from localrun.soak.runner import SoakOptions, SoakOutcome, soak

# Started first (tests/conftest.py): it a small soak under every fault kind.
pytestmark = pytest.mark.slow_module

BROKEN_LEDGER = Path(__file__).resolve().with_name("broken_ledger")
# A hard bound on a whole soak, not a performance assertion: a hang fails, it never waits forever.
HARD_TIMEOUT_SECONDS = 420.0


def soak_bounded(**kwargs: Any) -> SoakOutcome:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = soak(**kwargs)
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HARD_TIMEOUT_SECONDS)
    if thread.is_alive():
        pytest.fail(f"the soak did not finish within {HARD_TIMEOUT_SECONDS}s")
    if "error" in outcome:
        raise outcome["error"]
    result: SoakOutcome = outcome["result"]
    return result


class MovedOnStart(FunctionServer):
    """An instance whose first port another process took while it started, so that it serves
    on another one (FunctionServer.start does that on a busy machine): the URL it was created
    with is not the URL it serves on."""

    def start(self) -> None:
        if not getattr(self, "moved", False):
            self.moved = True
            self.port = free_loopback_port()
        super().start()


@pytest.mark.chaos
def test_a_small_soak_executes_every_run_once_under_every_fault_kind(
    emulator_host, project, tmp_path, monkeypatch
):
    # Every instance moves: a fault carried out through an instance's Firestore proxy finds it
    # by the URL the instance serves on, or its run would not be delivered at all.
    monkeypatch.setattr("localrun.soak.runner.FunctionServer", MovedOnStart)
    settings = load_stack_settings(SOAK_STACK, stacks_dir=DEMO_STACKS_DIR)
    plans = plan_soak(26, seed=4, min_each=1, excluded=(SoakFault.FORCED,))
    options = SoakOptions(runs=26, seed=4, instances=3, in_flight=12, forced=False)

    outcome = soak_bounded(
        settings=settings,
        plans=plans,
        options=options,
        emulator_host=emulator_host,
        firestore_project=project,
        out_dir=tmp_path,
    )

    outcomes = Counter(entry.outcome for entry in outcome.judged)
    assert len(outcome.judged) == 26 and outcome.stray == []
    assert outcomes[Outcome.TWICE] + outcomes[Outcome.TWICE_OVERLAPPING] + outcomes[Outcome.LOST] == 0
    assert outcomes[Outcome.NOT_DELIVERED] == 0
    assert outcomes[Outcome.ONCE] + outcomes[Outcome.GIVEN_UP] == 26
    injected = Counter(kind for kinds in outcome.injected.values() for kind in kinds)
    # The faults whose moment cannot be pre-empted by a quick answer happened, each.
    for kind in (
        SoakFault.KILL_MID_JOB,
        SoakFault.FREEZE,
        SoakFault.HANG,
        SoakFault.CLOCK_SKEW,
        SoakFault.RAISE,
    ):
        assert injected[kind.value] >= 1, kind
    assert outcome.instance_crashes >= 1 and outcome.instance_freezes >= 1
    assert outcome.restart_errors == []
    # The job failed terminally where it returned what a run cannot store, and ran once.
    unstorable = [p.index for p in plans if p.primary is SoakFault.UNSTORABLE]
    assert {e.ledger for e in outcome.judged if e.run in unstorable} == {"completed:terminal_failure"}


@pytest.mark.chaos
def test_a_ledger_whose_claim_lost_its_precondition_fails_the_soak_naming_a_doubled_run_and_its_seed(
    emulator_host, project, tmp_path
):
    settings = load_stack_settings(SOAK_STACK, stacks_dir=DEMO_STACKS_DIR)
    # Concurrent copies: with create() turned into set(), both copies claim the run.
    plans = [RunPlan(index, concurrent=True, sleep_seconds=0.3) for index in range(6)]
    options = SoakOptions(runs=6, seed=9, instances=2, forced=False, extra_pythonpath=(BROKEN_LEDGER,))

    outcome = soak_bounded(
        settings=settings,
        plans=plans,
        options=options,
        emulator_host=emulator_host,
        firestore_project=project,
        out_dir=tmp_path,
    )

    doubled = [e for e in outcome.judged if e.outcome in (Outcome.TWICE, Outcome.TWICE_OVERLAPPING)]
    assert doubled
    report = build_report(
        seed=9,
        runs=6,
        only=None,
        command="test",
        plans=plans,
        judged=outcome.judged,
        injected=outcome.injected,
        stray=outcome.stray,
        facts={},
    )
    assert report["ok"] is False
    lines = failure_lines(report)
    run = doubled[0].run
    assert any(
        f"FAILED run {run} " in line and "seed 9" in line and f"--only {run}" in line for line in lines
    )
