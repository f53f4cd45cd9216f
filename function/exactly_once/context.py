"""What job logic receives, and what it may return.

Job logic runs after the claim and before the finish, outside any transaction, so its side
effects happen at most once per successful claim. Anything it calls downstream should carry
`run_id` as an idempotency key and `fence` to reject stale writers. Failures are reported
with the exceptions of errors.py; a returned JSON value is stored as the run's output.

Two things a job hands the ledger ride in the ledger's own writes instead of costing RPCs of
their own: Firestore writes it stages (`writes`, committed with the completion: exactly once
with the run) and the progress it saves (`checkpoint`, carried by the lease's renewals).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from exactly_once import strict_json
from exactly_once.errors import TerminalJobError
from exactly_once.ledger.downstream import DownstreamReport
from exactly_once.ledger.previous_run import PreviousRun

if TYPE_CHECKING:
    from exactly_once.run_writes import RunWrites


@dataclass(frozen=True)
class RunContext:
    """One run, as the job sees it. It carries no client: it describes the run, and holds
    what the job hands the ledger (staged writes, checkpoints, a proxy's downstream work)
    until the ledger's own writes carry it. So a job is tested with a plain RunContext, and a
    job that keeps records of its own asks for the instance's client
    (exactly_once.firestore_client) or builds its own."""

    run_id: str
    job_name: str
    schedule_time: datetime
    project: str
    location: str
    attempt_id: str
    # The claim's commit time in nanoseconds: grows with every claim of this run, so a
    # downstream store can refuse writes carrying a smaller fence than it has seen.
    fence: int
    body: bytes
    # time.monotonic() at which the attempt is ended if the job has not returned (the stack
    # sets it a little before the function timeout); None: no limit (a test's plain context).
    ends_at: float | None = None
    # A run forced ahead of its ScheduleTime (`gcloud scheduler jobs run`): `schedule_time` is
    # the scheduled run it announced, which still runs on its own at that time.
    forced: bool = False
    # When this attempt's claim committed, on Firestore's clock: the run's "now" that neither a
    # forced ScheduleTime nor a skewed instance clock can move (the missed-run audit's horizon).
    # None in a plain context a test builds.
    claimed_at: datetime | None = None
    # The IANA zone the job's schedule is read in (its stack's `timeZone`): the run's own day is
    # the ScheduleTime's there (local_schedule_time), which UTC may put on another date.
    time_zone: str = "UTC"
    # Reads the job's last successful run; the function sets it, a test may too. None: no
    # earlier run is known (previous() answers None).
    previous_reader: Callable[[], PreviousRun | None] | None = field(default=None, repr=False, compare=False)

    @property
    def local_schedule_time(self) -> datetime:
        """The ScheduleTime in the job's zone: its `.date()` is the day the run is for. A job at
        00:30 Europe/Berlin whose "yesterday" is the UTC date less a day would get the day
        before yesterday (in UTC it is still 22:30 or 23:30 of the evening before)."""
        return self.schedule_time.astimezone(ZoneInfo(self.time_zone))

    def previous(self) -> PreviousRun | None:
        """The job's last successful run before this one (`schedule_time`, `output`), or None
        when it has none: what an incremental job continues from (a watermark in its output).
        One Firestore read, made when the job first asks, never for a job that does not; a
        read that fails raises, and the job fails retryably like on any other store error.

        "Last" is by completion: a run delivered long after its time (a backfill, a catch-up)
        sees the newest success, which may be scheduled after it; a forced run's success
        counts, with the time it announced. Keep the watermark in the output, not the time."""
        return self.previous_reader() if self.previous_reader is not None else None

    # The progress the attempt that held the run before this one saved with
    # checkpoint() and that reached the ledger (its last lease renewal, or its release);
    # None for a run's first attempt. See checkpoint().
    last_checkpoint: Any = None
    # Where checkpoint() keeps the latest value for the lease's heartbeat to carry.
    progress: Progress = field(default_factory=lambda: Progress(), repr=False, compare=False)
    # Firestore writes on the ledger's database, committed in the run's completing commit:
    # applied if and only if this attempt records the run completed (run_writes.py).
    writes: RunWrites = field(default_factory=lambda: _new_writes(), repr=False, compare=False)
    # What a proxy job started downstream, recorded with the run's completion and followed
    # to its end afterwards (ledger/downstream.py). Job code of its own leaves it empty.
    downstream: DownstreamReport = field(default_factory=DownstreamReport, repr=False, compare=False)

    def checkpoint(self, value: Any) -> None:
        """Save how far the job got (a JSON value, MAX_CHECKPOINT_BYTES at most), so that an
        attempt taking the run over after this one died resumes from it (last_checkpoint)
        instead of starting over. Costs no RPC: the next lease renewal carries the latest
        value in its own write, and a retryable failure's release carries it too. A value
        saved after the last renewal is lost if the instance dies before the next one; a
        completed run drops it. A value that cannot be stored is terminal (TerminalJobError),
        like an output that cannot."""
        self.progress.save(encode_json(value, "a checkpoint", MAX_CHECKPOINT_BYTES))

    def seconds_left(self) -> float:
        """How long the job may still run. A long job checks it between steps and stops in
        time (raise RetryableJobError to continue in a retry, or return what it has); one that
        overruns is ended with its instance, and its run is retried once the lease ends."""
        if self.ends_at is None:
            return math.inf
        return max(0.0, self.ends_at - time.monotonic())

    def json_body(self, allowed_fields: Collection[str] | None = None) -> dict[str, Any]:
        """The body as a JSON object ({} when empty). A malformed body (strict JSON: no NaN,
        no infinite numbers, nesting bounded), or one with fields outside `allowed_fields`, is
        terminal: Cloud Scheduler sends the same bytes on every
        retry, and a typo in a field name must not be silently ignored."""
        if not self.body.strip():
            return {}
        try:
            parsed = strict_json.loads(self.body)
        except strict_json.StrictJsonError as error:
            raise TerminalJobError(f"request body is not JSON: {error}") from None
        if not isinstance(parsed, dict):
            raise TerminalJobError("request body must be a JSON object")
        if allowed_fields is not None and (unknown := sorted(set(parsed) - set(allowed_fields))):
            raise TerminalJobError(f"unknown body fields {unknown}; expected {sorted(allowed_fields)}")
        return parsed


def _new_writes() -> RunWrites:
    # Imported when a context is made: this module stays free of the Firestore client.
    from exactly_once.run_writes import RunWrites

    return RunWrites()


class Progress:
    """The latest checkpoint of one attempt, as JSON text: written by the job's thread, read
    by the lease's heartbeat when it renews and by the release of a failed attempt. Starts
    from the checkpoint the attempt inherited, so a retry that saves nothing keeps it."""

    def __init__(self, inherited: str | None = None) -> None:
        self._lock = threading.Lock()
        self._latest = inherited

    def save(self, text: str | None) -> None:
        with self._lock:
            self._latest = text

    def latest(self) -> str | None:
        with self._lock:
            return self._latest


# Returns the run's output: a JSON value (or None), stored with the completing write.
JobHandler = Callable[[RunContext], Any]

# Stored in the run record (Firestore documents hold at most 1 MiB) and sent to every
# duplicate: an output is a summary (counts, ids, a URL), not the data itself.
MAX_OUTPUT_BYTES = 64 * 1024
# A checkpoint rides in the run record with every lease renewal: progress (a cursor, a page
# token, the ids done so far), not results.
MAX_CHECKPOINT_BYTES = 16 * 1024


def encode_output(value: Any) -> str | None:
    """The job's return value as stored JSON text (None for None)."""
    return None if value is None else encode_json(value, "the job's return value", MAX_OUTPUT_BYTES)


def encode_json(value: Any, what: str, limit: int) -> str:
    """`value` as stored JSON text of at most `limit` bytes. A value that cannot be stored is a
    terminal failure: running the job again would produce the same value. Too large or too
    deep is told first, by a walk that stops once it has seen enough (`_too_large_or_deep`):
    a 50 MB value is refused in microseconds, where encoding and scanning it would take
    seconds."""
    if (problem := _too_large_or_deep(value, limit)) is not None:
        raise TerminalJobError(f"{what} {problem}")
    try:
        text = strict_json.dumps(value)
    except strict_json.StrictJsonError as error:
        raise TerminalJobError(f"{what} cannot be stored as JSON: {error}") from None
    if strict_json.nesting_depth(text) > strict_json.MAX_DEPTH:
        raise TerminalJobError(f"{what} nests deeper than {strict_json.MAX_DEPTH} levels")
    if (size := len(text.encode())) > limit:
        raise TerminalJobError(f"{what} is {size} bytes of JSON, more than the {limit} a run stores")
    return text


def decode_checkpoint(text: str | None) -> Any:
    """A stored checkpoint as the job saved it; None when there is none, or when the record
    holds something checkpoint() did not write (nothing to resume from)."""
    if text is None:
        return None
    try:
        return strict_json.loads(text)
    except strict_json.StrictJsonError:
        return None


def _too_large_or_deep(value: Any, limit: int) -> str | None:
    """Why `value` cannot be stored, judged without encoding it, or None when it may fit.

    Walks the value counting bytes its JSON text has at the very least (a character of a
    string is one byte or more, a container two brackets and a separator per item), and
    stops as soon as that count passes `limit` or the walk passes
    strict_json.MAX_DEPTH: it looks at no more than `limit` items, whatever the
    value's size. A cycle is too deep. What passes is encoded and measured exactly."""
    least = 0
    # Iterators over the containers being walked, innermost last; a dict's yields its items.
    walking: list[tuple[Iterator[Any], bool]] = [(iter((value,)), False)]
    while walking:
        members, of_dict = walking[-1]
        member: Any = next(members, _WALKED)
        if member is _WALKED:
            walking.pop()
            continue
        if of_dict:
            key, member = member
            least += (len(key) if isinstance(key, str) else 1) + 3  # "key":
        if isinstance(member, dict | list | tuple):
            if len(walking) > strict_json.MAX_DEPTH:
                return f"nests deeper than {strict_json.MAX_DEPTH} levels"
            least += 2 + max(len(member) - 1, 0)
            if isinstance(member, dict):
                walking.append((iter(member.items()), True))
            else:
                walking.append((iter(member), False))
        elif isinstance(member, str):
            least += len(member) + 2
        else:
            least += 1
        if least > limit:
            return f"more than the {limit} bytes of JSON a run stores"
    return None


_WALKED = object()
