"""The soak's independent count: what each run came to, from records the faults cannot touch.

Three sources, none of them the function's own account of itself:

- the execution file the job appends to (served/soak_record.py): every `start` and `end` of
  the job, in the order they happened, each naming the soak's run (`tag`). An execution is
  an `end`: the job's side effect;
- the scheduler's log (scheduler.jsonl): every run the soak delivered, its deliveries and
  whether the scheduler gave up on it (retries exhausted);
- the ledger, read from the emulator with the Firestore client by the records' field names
  (`job_name`, `schedule_time`, `status`, `result`): what it says of each scheduled run.

No code of the function's package decides anything here: a ledger that lets a run run twice
cannot also make this count look right.

Per run: executed once; executed twice or more (overlapping: one began before the other
ended); never executed although the scheduler did not give up (lost); given up by the
scheduler without an execution (retries exhausted: counted, not hidden).
"""

from __future__ import annotations

import enum
import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from localrun.soak.served import soak_record


class Outcome(enum.StrEnum):
    ONCE = "once"
    TWICE = "twice"  # twice or more, apart
    TWICE_OVERLAPPING = "twice_overlapping"  # twice or more, two of them at the same time
    LOST = "lost"  # never executed although the scheduler did not give up
    GIVEN_UP = "given_up"  # never executed, and the scheduler's retries ran out
    NOT_DELIVERED = "not_delivered"  # the soak itself failed to deliver it: no verdict

    @property
    def fails(self) -> bool:
        return self in (Outcome.TWICE, Outcome.TWICE_OVERLAPPING, Outcome.LOST, Outcome.NOT_DELIVERED)


@dataclass
class Execution:
    attempt_id: str
    start_line: int | None
    end_line: int | None
    pid: int | None


@dataclass
class Judged:
    tag: str
    run: int
    role: str
    job_id: str
    schedule_time: str
    outcome: Outcome
    executions: int
    acknowledged: bool
    deliveries: int
    ledger: str  # the record's status/result, or "none"
    executions_detail: list[dict[str, Any]] = field(default_factory=list)
    harness_error: str = ""  # why the soak could not deliver it (not_delivered)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "outcome": self.outcome.value}


def executions_by_tag(path: Path) -> dict[str, list[Execution]]:
    """Each run's executions (an `end`), paired with their `start` by attempt id, with the
    line numbers that order them."""
    by_attempt: dict[tuple[str, str], Execution] = {}
    for number, record in enumerate(soak_record.read(path)):
        key = (str(record.get("tag")), str(record.get("attempt_id")))
        execution = by_attempt.setdefault(key, Execution(key[1], None, None, record.get("pid")))
        if record.get("event") == soak_record.START and execution.start_line is None:
            execution.start_line = number
        elif record.get("event") == soak_record.END:
            if execution.end_line is not None:  # the same attempt twice: count both
                by_attempt[(key[0], f"{key[1]}#{number}")] = Execution(
                    key[1], execution.start_line, number, None
                )
            else:
                execution.end_line = number
    found: dict[str, list[Execution]] = defaultdict(list)
    for (tag, _), execution in by_attempt.items():
        if execution.end_line is not None:
            found[tag].append(execution)
    return found


def overlapping(executions: Sequence[Execution]) -> bool:
    """Whether two executions ran at the same time: one began before the other ended."""
    spans = sorted(
        (e.start_line if e.start_line is not None else e.end_line or 0, e.end_line or 0) for e in executions
    )
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


def ledger_states(
    db: firestore.Client, collection: str, job_ids: Iterable[str]
) -> dict[tuple[str, str], str]:
    """(job id, schedule time RFC 3339) -> the record's status, and result once completed."""
    states: dict[tuple[str, str], str] = {}
    for job_id in job_ids:
        query = db.collection(collection).where(filter=FieldFilter("job_name", "==", job_id))
        for doc in query.stream():
            fields = doc.to_dict() or {}
            when = fields.get("schedule_time")
            key = when.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(when, datetime) else str(when)
            status = str(fields.get("status"))
            states[(job_id, key)] = f"{status}:{fields.get('result')}" if status == "completed" else status
    return states


def read_scheduler_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def judge_runs(
    delivered: Sequence[Mapping[str, Any]],
    executions: Mapping[str, Sequence[Execution]],
    ledger: Mapping[tuple[str, str], str],
) -> list[Judged]:
    judged = []
    for entry in delivered:
        tag = str(entry["tag"])
        found = executions.get(tag, [])
        acknowledged = bool(entry["acknowledged"])
        if entry.get("harness_error"):
            outcome = Outcome.NOT_DELIVERED
        elif len(found) >= 2:
            outcome = Outcome.TWICE_OVERLAPPING if overlapping(found) else Outcome.TWICE
        elif len(found) == 1:
            outcome = Outcome.ONCE
        else:
            outcome = Outcome.LOST if acknowledged else Outcome.GIVEN_UP
        judged.append(
            Judged(
                tag=tag,
                run=int(entry["run"]),
                role=str(entry["role"]),
                job_id=str(entry["job_id"]),
                schedule_time=str(entry["schedule_time"]),
                outcome=outcome,
                executions=len(found),
                acknowledged=acknowledged,
                deliveries=len(entry["deliveries"]),
                ledger=ledger.get((str(entry["job_id"]), str(entry["schedule_time"])), "none"),
                executions_detail=[e.__dict__ for e in found],
                harness_error=str(entry.get("harness_error") or ""),
            )
        )
    return judged


def stray_executions(
    delivered: Sequence[Mapping[str, Any]], executions: Mapping[str, Sequence[Execution]]
) -> list[str]:
    """Tags that executed but that the soak never delivered: none, unless something is badly off."""
    known = {str(entry["tag"]) for entry in delivered}
    return sorted(tag for tag in executions if tag not in known)


def check(
    executions_path: Path,
    scheduler_log_path: Path,
    db: firestore.Client,
    collection: str,
    expected: Sequence[str],
) -> tuple[list[Judged], list[str]]:
    """The verdicts of the runs the scheduler's log names; a run in `expected` (the soak's
    scheduled runs) that it does not name is stray too: lost by the harness, not hidden."""
    delivered = read_scheduler_log(scheduler_log_path)
    logged = {str(entry["tag"]) for entry in delivered}
    executions = executions_by_tag(executions_path)
    ledger = ledger_states(db, collection, sorted({str(entry["job_id"]) for entry in delivered}))
    missing = [f"{tag} (never logged by the scheduler)" for tag in expected if tag not in logged]
    return judge_runs(delivered, executions, ledger), stray_executions(delivered, executions) + missing
