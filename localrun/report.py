"""What a local run reports: the JSON report, the table of runs and the verdict line.

Everything counted here comes from the function's own log lines and the run ledger, read after
the runs (localrun/verdicts.py), not from the answers the scheduler saw; the answers are shown
too, as the story of each run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exactly_once.config import DEFAULT_DATABASE
from infra.settings.jobs import JobSettings
from infra.settings.stack import StackSettings
from localrun.compression import CompressedTiming
from localrun.delivery import Delivery, RunResult
from localrun.faults import Fault, RunFaults, fault_counts
from localrun.scheduler import ENDED
from localrun.verdicts import Verdict
from policy.scheduler_guardrails.rules.timing import rules as timing


@dataclass(frozen=True)
class RunFacts:
    """How the local run was set up and what its instances went through."""

    seed: int
    speedup: float
    interval_seconds: float
    instances: int
    firestore_rtt_seconds: float
    compressed: CompressedTiming
    instance_crashes: int
    instance_restart_errors: Sequence[str]
    attempts_ended: int
    delayed_connections: int  # the function's connections to Firestore through the delaying proxy
    duration_seconds: float
    # Where the run ledger is: the emulator, and the project of its own this run wrote to.
    emulator_host: str
    firestore_project: str
    # Two regions (localrun/regions.py): label -> region name, and the outage; empty and None
    # in one region.
    regions: Mapping[str, str] = field(default_factory=dict)
    outage: Mapping[str, Any] | None = None


def build_report(
    settings: StackSettings,
    job: JobSettings,
    plan: Sequence[RunFaults],
    results: Sequence[RunResult],
    facts: RunFacts,
) -> dict[str, Any]:
    injected = dict.fromkeys((fault.value for fault in Fault), 0)
    for result in results:
        for fault in {f for d in result.deliveries for f in d.faults}:
            injected[fault] += 1
    verdicts = {verdict.value: sum(r.verdict == verdict for r in results) for verdict in Verdict}
    arrivals = timing.retry_arrivals_if_every_attempt_fails_instantly(job.retry)
    retry_waits = [later - earlier for earlier, later in zip([0.0, *arrivals], arrivals, strict=False)]
    compressed = facts.compressed
    speedup = facts.speedup
    return {
        # Every run executed exactly once and the job succeeded on each.
        "ok": verdicts[Verdict.SUCCEEDED] == len(results),
        "job": job.name,
        "schedule": job.schedule,
        "time_zone": job.time_zone,
        "seed": facts.seed,
        "speedup": speedup,
        "interval_seconds": facts.interval_seconds,
        "firestore_rtt_seconds": facts.firestore_rtt_seconds,
        "firestore_connections_delayed": facts.delayed_connections,
        "runs": len(results),
        "verdicts": verdicts,
        # Runs whose job ran to its end once, whether it succeeded or failed terminally.
        "exactly_once": verdicts[Verdict.SUCCEEDED] + verdicts[Verdict.FAILED],
        "duplicate": verdicts[Verdict.DUPLICATE],
        "never": verdicts[Verdict.NEVER],
        "retries_exhausted": sum(r.retries_exhausted for r in results),
        "deliveries": sum(len(r.deliveries) for r in results),
        "faults_planned": fault_counts(plan),
        # Runs on which each fault really happened (a crash can be pre-empted by the answer).
        "faults_injected": injected,
        "instances": facts.instances,
        "instance_crashes": facts.instance_crashes,
        "instance_restart_errors": list(facts.instance_restart_errors),
        # Attempts the function's watchdog ended at their time limit (its log lines).
        "attempts_ended": facts.attempts_ended,
        "duration_seconds": round(facts.duration_seconds, 2),
        # What `python -m ops` needs to read this run's records (--firestore-project, --database).
        "ledger": {
            "emulator_host": facts.emulator_host,
            "project": facts.firestore_project,
            "database": DEFAULT_DATABASE,
            "collection": settings.runs_collection,
        },
        "timing": {
            "simulated": {
                "attempt_deadline_seconds": job.attempt_deadline_seconds,
                "function_timeout_seconds": settings.function_timeout_seconds,
                "time_limit_seconds": settings.job_time_limit(job),
                "lease_seconds": settings.lease_seconds,
                "retention_seconds": settings.retention_seconds,
                "retry_waits_seconds": retry_waits,
            },
            # Every duration divided by the speed-up, but none below its floor (compression.py).
            "wall_clock": {
                "attempt_deadline_seconds": compressed.attempt_deadline_seconds(settings, job),
                "function_timeout_seconds": compressed.function_timeout_seconds,
                "time_limit_seconds": compressed.time_limit_seconds,
                "time_limit_floor_seconds": compressed.time_limit_floor_seconds,
                "lease_seconds": compressed.lease_seconds,
                "lease_floor_seconds": compressed.lease_floor_seconds,
                "retention_seconds": compressed.retention_seconds,
                "retry_waits_seconds": [wait / speedup for wait in retry_waits],
            },
            # The local run's own timing (floored lease included), judged by the stack's rules.
            "violations": [
                {"rule": v.rule, "advisory": v.advisory, "message": v.message}
                for v in timing.check_job_timing(compressed.job_timing(settings, job))
            ],
        },
        **_regions(results, facts),
        "results": [r.to_json() for r in results],
    }


def _regions(results: Sequence[RunResult], facts: RunFacts) -> dict[str, Any]:
    """What each region delivered and executed, and the runs only one region delivered."""
    if not facts.regions:
        return {}
    delivered_by = {r.index: {d.region for d in r.deliveries} for r in results}
    return {
        "regions": {
            label: {
                "name": name,
                "deliveries": sum(d.region == label for r in results for d in r.deliveries),
                "runs_delivered": sum(label in regions for regions in delivered_by.values()),
                "executions": sum(r.executed_in.count(label) for r in results),
            }
            for label, name in facts.regions.items()
        },
        "region_outage": dict(facts.outage) if facts.outage is not None else None,
        # Runs one region alone delivered (the other was down): label -> runs (1-based).
        "delivered_alone": {
            label: sorted(index + 1 for index, regions in delivered_by.items() if regions == {label})
            for label in facts.regions
        },
    }


# --- output -----------------------------------------------------------------------------------


def delivery_token(delivery: Delivery) -> str:
    if delivery.outcome == "timeout":
        token = "T/O"
    elif delivery.outcome == "dropped":
        token = "DROP"
    elif delivery.outcome == ENDED:
        token = "END"
    else:
        token = str(delivery.status) + ("!" if delivery.outcome.startswith("lost_ack") else "")
    if delivery.region:
        token = f"{delivery.region}:{token}"
    return f"[{token}]" if delivery.copy else token


def in_order_sent(deliveries: Sequence[Delivery]) -> list[Delivery]:
    return sorted(deliveries, key=lambda d: (d.sent_at_s, d.attempt, d.copy))


def render_table(report: dict[str, Any]) -> str:
    regional = bool(report.get("regions"))
    header = ["#", "schedule time (UTC)", "faults", "deliv", "status codes", "execs", "outcome"]
    if regional:
        header.insert(6, "executed in")
    rows: list[list[str]] = [header]
    for run in report["results"]:
        deliveries = in_order_sent([Delivery(**d) for d in run["deliveries"]])
        tokens = " ".join(delivery_token(d) for d in deliveries)
        outcome = Verdict(run["verdict"]).shown + ("; scheduler gave up" if run["retries_exhausted"] else "")
        shown = {fault for d in deliveries for fault in d.faults}
        row = [
            str(run["index"] + 1),
            run["schedule_time"],
            ",".join(f if f in shown else f"({f})" for f in run["faults"]) or "-",
            str(len(deliveries)),
            tokens,
            str(run["executions"]),
            outcome,
        ]
        if regional:
            row.insert(6, ",".join(run["executed_in"]) or "-")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.append(
        "status codes in order sent: T/O = no answer within the attempt deadline, "
        "END = the function ended the attempt, with its instance, at its time limit, "
        "DROP = connection cut (crash/restart), 200! = answer lost on the way back, "
        "[..] = injected duplicate copy, (fault) = planned but pre-empted"
    )
    if regional:
        names = ", ".join(
            f"{label}:... = sent by region {label} ({r['name']})" for label, r in report["regions"].items()
        )
        lines.append(f"{names}; faults are planned on region a's deliveries")
    return "\n".join(line.rstrip() for line in lines)


def region_lines(report: dict[str, Any]) -> list[str]:
    """In two regions: what each region delivered and executed, and the outage's runs."""
    if not report.get("regions"):
        return []
    lines = [
        f"region {label} ({r['name']}): delivered {r['runs_delivered']} runs in {r['deliveries']} "
        f"deliveries, executed {r['executions']}"
        for label, r in report["regions"].items()
    ]
    outage = report.get("region_outage")
    if outage is not None:
        survivor = next(label for label in report["regions"] if label != outage["region"])
        alone = report["delivered_alone"][survivor]
        once = sum(run["executions"] == 1 for run in report["results"] if run["index"] + 1 in alone)
        lines.append(
            f"region {outage['region']} ({outage['name']}) down from run {outage['first_run']} to run "
            f"{outage['last_run']}: region {survivor} delivered {len(alone)} runs alone, "
            f"{once} of them executed exactly once"
        )
    return lines


def reasons(report: dict[str, Any]) -> list[str]:
    """Why each run that did not succeed came to what it did, for the terminal: a terminal
    failure's reason as the ledger recorded it, the last failure of a run that never executed."""
    lines = []
    for run in report["results"]:
        verdict = Verdict(run["verdict"])
        if verdict is not Verdict.SUCCEEDED:
            lines.append(f"run {run['index'] + 1} ({run['schedule_time']}) {verdict.shown}: {run['reason']}")
    return lines


def verdict_line(report: dict[str, Any]) -> str:
    injected = ", ".join(f"{name} {count}" for name, count in report["faults_injected"].items())
    ended = f"; attempts ended at their time limit: {report['attempts_ended']}"
    counts = report["verdicts"]
    if report["ok"]:
        return (
            f"PASS: {counts[Verdict.SUCCEEDED]}/{report['runs']} runs executed exactly once and succeeded "
            f"({report['deliveries']} deliveries; faults injected: {injected}{ended})"
        )
    return (
        f"FAIL: of {report['runs']} runs, {counts[Verdict.SUCCEEDED]} executed once and succeeded, "
        f"{counts[Verdict.FAILED]} executed once and failed terminally, {counts[Verdict.NEVER]} never "
        f"executed, {counts[Verdict.DUPLICATE]} executed more than once "
        f"({report['deliveries']} deliveries; faults injected: {injected}{ended})"
    )
