"""Two regions, one run, in the demo: two schedulers, two regions' function instances, one
emulator database; region a down for a stretch, which region b delivers alone."""

from __future__ import annotations

import pytest

from localrun.delivery import Delivery, RunResult
from localrun.demo import load_settings, parse_args
from localrun.faults import FaultRates
from localrun.regions import Outage, RegionSwitch, delivery_offsets, demo_outage, merged, region_names
from localrun.report import region_lines, render_table
from localrun.simulation import SimulationOptions
from localrun.verdicts import EXIT_OK, Verdict, exit_code
from tests.support.bounded_simulation import simulate_bounded


def test_the_second_region_is_named_after_the_stack_s_and_there_are_at_most_two():
    assert region_names("europe-west1", 2) == {"a": "europe-west1", "b": "europe-west1-b"}
    assert region_names("europe-west1", 1) == {"a": "europe-west1"}
    with pytest.raises(ValueError, match="--regions must be 1 or 2, got 3"):
        region_names("europe-west1", 3)
    with pytest.raises(SystemExit):
        parse_args(["--regions", "3"])
    assert parse_args([]).regions == 1


def test_region_b_delivers_after_region_a_mostly_before_it_sometimes_the_same_for_a_seed():
    offsets = delivery_offsets(200, seed=4, latest=3.0, earliest=0.5)
    assert offsets == delivery_offsets(200, seed=4, latest=3.0, earliest=0.5)
    assert offsets != delivery_offsets(200, seed=5, latest=3.0, earliest=0.5)
    before = [o for o in offsets if o < 0]
    assert 10 <= len(before) <= 70 and all(o >= -0.5 for o in before)
    assert all(0.05 <= o <= 3.0 for o in offsets if o >= 0)


def test_one_region_at_most_is_down_and_the_demo_s_outage_leaves_runs_on_both_sides():
    switch = RegionSwitch()
    up_a, up_b = switch.up("a"), switch.up("b")
    assert switch.take_down("a") and not up_a() and up_b()
    assert not switch.take_down("b") and up_b()
    switch.bring_up("a")
    assert up_a() and switch.take_down("b") and not up_b()
    assert switch.outages == 2
    assert demo_outage(2) is None


def test_a_region_goes_down_only_once_the_other_has_been_back_up_for_the_guard():
    now = [100.0]
    switch = RegionSwitch(guard_seconds=25.0, monotonic=lambda: now[0])
    assert switch.take_down("a")
    now[0] += 3
    switch.bring_up("a")
    now[0] += 24
    assert not switch.take_down("b") and switch.up("b")()
    assert switch.take_down("a")  # the same region again: no run of the other's is left short
    switch.bring_up("a")
    now[0] += 25
    assert switch.take_down("b") and switch.outages == 3
    assert demo_outage(20) == Outage("a", 6, 5)
    assert demo_outage(3) == Outage("a", 1, 1)
    for runs in range(3, 60):
        outage = demo_outage(runs)
        assert outage is not None and outage.first_run > 0 and outage.last_run < runs - 1


def test_a_run_s_deliveries_from_both_regions_are_timed_from_its_firing():
    a = RunResult(0, "job", "2026-01-01T00:00:00Z", ["duplicate"])
    a.deliveries.append(Delivery(1, False, 0.0, 200, "succeeded", answered_at_s=1.0, region="a"))
    b = RunResult(0, "job", "2026-01-01T00:00:00Z", [])
    b.deliveries.append(Delivery(1, False, 0.0, 200, "duplicate_completed", answered_at_s=0.5, region="b"))
    run = merged({"a": a, "b": b}, offset=2.0, speedup=20.0)
    assert [(d.region, d.sent_at_s, d.answered_at_s) for d in run.deliveries] == [
        ("a", 0.0, 1.0),
        ("b", 40.0, 40.5),
    ]
    assert run.faults == ["duplicate"] and run.acknowledged is False
    b.acknowledged = True
    assert merged({"a": a, "b": b}, offset=-0.5, speedup=20.0).deliveries[0].sent_at_s == 10.0
    assert merged({"a": a, "b": b}, offset=-0.5, speedup=20.0).acknowledged


@pytest.mark.chaos
def test_the_demo_in_two_regions_executes_every_run_once_the_outage_s_by_region_b_alone(
    emulator_host, project, tmp_path
):
    settings = load_settings(None)
    runs = 6
    options = SimulationOptions(
        runs=runs,
        seed=3,
        instances=1,
        interval_seconds=0.3,
        rates=FaultRates(duplicate=0.3, lost_ack=0.3, slow=0.0, crash=0.0, fail=0.0),
        regions=2,
    )
    report = simulate_bounded(
        settings=settings,
        job=settings.jobs[0],
        options=options,
        emulator_host=emulator_host,
        firestore_project=project,
        log_dir=tmp_path,
    )

    results = report["results"]
    assert [r["executions"] for r in results] == [1] * runs
    assert exit_code([Verdict(r["verdict"]) for r in results]) == EXIT_OK
    outage = demo_outage(runs)
    assert outage is not None
    down = set(range(outage.first_run + 1, outage.last_run + 2))  # 1-based, as reported
    assert report["region_outage"] == {
        "region": "a",
        "name": settings.region,
        "first_run": outage.first_run + 1,
        "last_run": outage.last_run + 1,
    }
    # The outage's runs: region b alone sent them and ran them; region a sent the others.
    assert down <= set(report["delivered_alone"]["b"])
    for run in results:
        if run["index"] + 1 in down:
            assert {d["region"] for d in run["deliveries"]} == {"b"} and run["executed_in"] == ["b"]
    assert report["regions"]["a"]["runs_delivered"] >= runs - len(down) - 1
    assert report["regions"]["b"]["runs_delivered"] == runs
    assert sum(r["executions"] for r in report["regions"].values()) == runs
    assert (tmp_path / "function-b.log").exists()
    table = render_table(report)
    assert "executed in" in table and "b:200" in table
    lines = region_lines(report)
    assert lines[-1].startswith(f"region a ({settings.region}) down from run {outage.first_run + 1} ")
    assert f"{len(report['delivered_alone']['b'])} of them executed exactly once" in lines[-1]
