"""The soak's independent count, on execution files and scheduler logs written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localrun.soak.checker import Outcome, executions_by_tag, judge_runs
from localrun.soak.served import soak_record


def delivered(tag: str, *, acknowledged: bool = True, error: str = "") -> dict[str, Any]:
    return {
        "tag": tag,
        "run": int(tag.lstrip("r")),
        "role": "scheduled",
        "job_id": "job",
        "schedule_time": "2020-01-01T00:00:00Z",
        "acknowledged": acknowledged,
        "deliveries": [{}],
        "harness_error": error,
    }


def test_each_run_is_judged_from_the_executions_its_job_recorded(tmp_path: Path):
    path = tmp_path / "executions.jsonl"
    events = [
        ("start", "r1", "a"),
        ("end", "r1", "a"),  # once
        ("start", "r2", "b"),
        ("start", "r2", "c"),
        ("end", "r2", "b"),
        ("end", "r2", "c"),  # at once
        ("start", "r3", "d"),
        ("end", "r3", "d"),
        ("start", "r3", "e"),
        ("end", "r3", "e"),  # one after the other
        ("start", "r4", "f"),  # started, never ended: not an execution
        ("start", "r6", "g"),
        ("end", "r6", "g"),
    ]
    for event, tag, attempt in events:
        soak_record.append(str(path), event, tag, attempt_id=attempt)

    judged = judge_runs(
        [
            delivered("r1"),
            delivered("r2"),
            delivered("r3"),
            delivered("r4"),
            delivered("r5", acknowledged=False),
            delivered("r6", acknowledged=False),
            delivered("r7", acknowledged=False, error="no instance came free"),
        ],
        executions_by_tag(path),
        {("job", "2020-01-01T00:00:00Z"): "completed:succeeded"},
    )

    outcomes = {entry.tag: entry.outcome for entry in judged}
    assert outcomes == {
        "r1": Outcome.ONCE,
        "r2": Outcome.TWICE_OVERLAPPING,
        "r3": Outcome.TWICE,
        "r4": Outcome.LOST,  # acknowledged, yet its job never reached its side effect
        "r5": Outcome.GIVEN_UP,
        "r6": Outcome.ONCE,  # the scheduler gave up, but the job had run
        "r7": Outcome.NOT_DELIVERED,
    }
    assert [entry.tag for entry in judged if entry.outcome.fails] == ["r2", "r3", "r4", "r7"]
    assert judged[0].ledger == "completed:succeeded"


def test_lines_appended_by_many_processes_are_read_whole_in_order(tmp_path: Path):
    import multiprocessing

    path = tmp_path / "executions.jsonl"
    with multiprocessing.Pool(4) as pool:
        pool.starmap(_append_many, [(str(path), f"w{n}") for n in range(4)])
    records = list(soak_record.read(path))
    assert len(records) == 4 * 50
    for worker in range(4):
        mine = [r["n"] for r in records if r["tag"] == f"w{worker}"]
        assert mine == list(range(50))


def _append_many(path: str, tag: str) -> None:
    for n in range(50):
        soak_record.append(path, "end", tag, n=n, padding="x" * 500)
