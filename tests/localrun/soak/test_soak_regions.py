"""Two regions, one run: every scheduled run delivered by two regional schedulers (each with
its own retries and its own function instance, one emulator database), executed once, with
both regions up and with one region down for a stretch. Counted by the soak's independent
checker (the job's execution file), not by the function's account of itself."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from infra.settings.loading import load_stack_settings
from localrun.demo import DEMO_STACKS_DIR
from localrun.regions import delivery_offsets
from localrun.soak.__main__ import SOAK_STACK
from localrun.soak.checker import Outcome
from localrun.soak.plan import RunPlan, SoakFault
from localrun.soak.runner import SoakOptions
from tests.localrun.soak.test_soak import soak_bounded

RUNS = 30
SEED = 2
DOWN_RUN = 6  # region a goes down when this run is fired ...
DOWN_SECONDS = 2.0  # ... for this long: the runs fired meanwhile, region b delivers alone


def regions_of_each_run(scheduler_log: Path) -> dict[int, set[str]]:
    """Which regions' schedulers sent each scheduled run a delivery, from the scheduler's log."""
    entries = [json.loads(line) for line in scheduler_log.read_text(encoding="utf-8").splitlines()]
    return {entry["run"]: {delivery["region"] for delivery in entry["deliveries"]} for entry in entries}


@pytest.mark.chaos
def test_two_regions_execute_every_run_once_with_both_up_and_with_one_region_down(
    emulator_host, project, tmp_path
):
    settings = load_stack_settings(SOAK_STACK, stacks_dir=DEMO_STACKS_DIR)
    plans = [RunPlan(index, sleep_seconds=0.1) for index in range(RUNS)]
    plans[DOWN_RUN] = RunPlan(
        DOWN_RUN, primary=SoakFault.REGION_DOWN, variant="a", seconds=DOWN_SECONDS, sleep_seconds=0.1
    )
    # Region b delivers some runs before region a, most after it, a different moment each run.
    offsets = delivery_offsets(RUNS, SEED, latest=1.0, earliest=0.3)
    assert any(offset < 0 for offset in offsets) and any(offset > 0 for offset in offsets)
    options = SoakOptions(runs=RUNS, seed=SEED, instances=1, in_flight=RUNS, forced=False, regions=2)

    outcome = soak_bounded(
        settings=settings,
        plans=plans,
        options=options,
        emulator_host=emulator_host,
        firestore_project=project,
        out_dir=tmp_path,
    )

    outcomes = Counter(entry.outcome for entry in outcome.judged)
    assert outcome.stray == []
    assert outcomes == Counter({Outcome.ONCE: RUNS}), [
        e.to_json() for e in outcome.judged if e.executions != 1
    ]
    assert outcome.injected[3 * DOWN_RUN] == [SoakFault.REGION_DOWN.value]
    regions = regions_of_each_run(tmp_path / "scheduler.jsonl")
    both = [run for run, sent in regions.items() if sent == {"a", "b"}]
    b_alone = [run for run, sent in regions.items() if sent == {"b"}]
    # Before the outage both regions delivered (region a's delivery of a run it sends late may
    # fall into the outage); the run that took region a down, and the next, region b alone.
    assert len([run for run in both if run < DOWN_RUN]) >= 3
    assert {DOWN_RUN, DOWN_RUN + 1} <= set(b_alone)
    # And region a delivers again once it is back up.
    assert any(run > DOWN_RUN + 1 for run in both)
    # Every delivery of a run carries the same headers, whichever region sent it: one run
    # id, so one ledger record per run.
    assert {entry.ledger for entry in outcome.judged} == {"completed:succeeded"}
