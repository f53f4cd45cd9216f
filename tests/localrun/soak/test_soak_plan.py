"""The soak's fault schedules: drawn from the seed, the same for a run in any soak."""

from __future__ import annotations

from localrun.soak.plan import ALONE, COMBINABLE, PRIMARY, SoakFault, plan_soak, planned_counts


def test_a_run_has_the_same_schedule_whatever_the_soak_s_size():
    small = plan_soak(400, seed=5, min_each=0)
    large = plan_soak(3000, seed=5, min_each=0)
    assert small == large[:400]
    assert plan_soak(400, seed=6, min_each=0) != small


def test_every_kind_is_placed_on_at_least_min_each_runs_and_a_run_has_one_primary_fault():
    plans = plan_soak(1000, seed=1, min_each=20, regions=2)
    counts = planned_counts(plans)
    assert {kind: n for kind, n in counts.items() if n < 20} == {}
    assert all(len([k for k in plan.kinds if k in PRIMARY]) <= 1 for plan in plans)
    assert sum(plan.primary is None for plan in plans) > 400  # most runs still run plain


def test_a_short_soak_places_every_kind_as_often_as_it_has_runs_free():
    plans = plan_soak(30, seed=3, min_each=1, regions=2)
    assert min(planned_counts(plans).values()) >= 1


def test_an_excluded_kind_is_never_planned():
    plans = plan_soak(500, seed=2, min_each=5, excluded=(SoakFault.FORCED, SoakFault.DUPLICATE))
    counts = planned_counts(plans)
    assert (counts["forced"], counts["duplicate"]) == (0, 0)
    assert counts["freeze"] >= 5 and counts["concurrent"] >= 5


def test_the_faults_that_end_or_cut_an_instance_are_sent_alone_and_combine_with_copies():
    assert SoakFault.KILL_MID_JOB in ALONE and SoakFault.FIRESTORE_CUT in ALONE
    assert SoakFault.CLOCK_SKEW not in ALONE and SoakFault.LOST_REPLY not in ALONE
    assert set(COMBINABLE) == {SoakFault.CONCURRENT, SoakFault.DUPLICATE}
    assert set(PRIMARY) | set(COMBINABLE) == set(SoakFault)


def test_a_region_s_fault_is_planned_only_in_two_regions_and_leaves_one_region_s_plans_as_they_were():
    one = plan_soak(300, seed=3, min_each=3)
    two = plan_soak(300, seed=3, min_each=3, regions=2)
    assert planned_counts(one)["region_down"] == 0
    assert planned_counts(two)["region_down"] >= 3
    downs = [plan for plan in two if plan.primary is SoakFault.REGION_DOWN]
    assert {plan.variant for plan in downs} <= {"a", "b"} and all(2.0 <= p.seconds <= 6.0 for p in downs)
    # Every run region_down did not take is planned as in one region.
    assert [p for p in two if p.primary is not SoakFault.REGION_DOWN] == [
        p for p, q in zip(one, two, strict=True) if q.primary is not SoakFault.REGION_DOWN
    ]
