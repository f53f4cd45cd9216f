"""Faults inside a served function's own Firestore client, and jobs that mark what they do.

Served by a real Functions Framework process as its JOB_HANDLER module
(JOB_HANDLER=tests.support.faulty_instance:<job>, the repository root on PYTHONPATH). When the
process imports it with FIRESTORE_FAULTS naming a file, the instance's one Firestore client
(exactly_once.firestore_client, which the ledger, the job locks and the token check share)
is built with a gRPC interceptor that reads its rules from that file before every RPC. The
test rewrites the file to change the faults while the server runs (`Faults.set`).

A rule matches an RPC by method name ("*": any) and by the fields its write sets (all of
them: ["attempt_id"] is a claim's write, ["renewed_at"] a renewal, ["completed_at"] a
completion); `times` bounds how often it applies, and `after` (another rule's id) holds it
back until that rule has applied. What it does:

- lose:    the RPC is sent and answered, then the answer is dropped: the client waits out the
           call's timeout and sees DEADLINE_EXCEEDED. A write has committed.
- delay:   the answer comes `seconds` late; past the call's timeout, as `lose` at the timeout.
- fail:    the RPC is not sent: UNAVAILABLE, as with Firestore cut off.
- refresh: the RPC is not sent: the credentials' refresh fails (not a Google API error).
- freeze:  the process stops itself (SIGSTOP) before sending, until the test thaws it
           (`Faults.thaw`).

With INSTANCE_CLOCK_OFFSET_SECONDS set, the instance's wall clock (as the function reads
it) is that far off.

Every RPC's fate is appended to the file's `.events` sibling as one JSON line, in order.

The jobs mark each attempt in `attempt_marks/{attempt_id}` with a client of their own, never
faulted: started_at, alive_at (Firestore commit times) and finished.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import grpc
from google.auth.exceptions import RefreshError
from google.cloud import firestore
from google.cloud.firestore_v1.services.firestore import FirestoreClient
from google.cloud.firestore_v1.services.firestore.transports import FirestoreGrpcTransport

from exactly_once import RunContext, TerminalJobError
from exactly_once.once import OncePerInstance

FAULTS_ENV = "FIRESTORE_FAULTS"
CLOCK_OFFSET_ENV = "INSTANCE_CLOCK_OFFSET_SECONDS"
MARKS = "attempt_marks"
ALIVE_EVERY_SECONDS = 0.25

Rule = dict[str, Any]


class Faults:
    """The test's side: the rules file a served instance reads, and the events it wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events_path = path.with_name(path.name + ".events")
        self.set([])

    @property
    def env(self) -> dict[str, str]:
        return {FAULTS_ENV: str(self.path)}

    def set(self, rules: Sequence[Rule]) -> None:
        """Replace the rules, atomically: an RPC sees the old rules or the new ones."""
        staging = self.path.with_name(self.path.name + ".new")
        staging.write_text(json.dumps(list(rules)))
        staging.replace(self.path)

    def thaw(self, pid: int) -> None:
        """Let a process its `freeze` rule stopped go on."""
        self.path.with_name(self.path.name + ".thawed").touch()
        os.kill(pid, signal.SIGCONT)

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line]


class _RpcFailure(grpc.RpcError):
    """What gRPC raises for a failed call, as google.api_core maps it to its exceptions."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[Any, ...]:
        return ()

    # What gRPC expects of a finished call when an outer interceptor receives this as one.
    def result(self, timeout: float | None = None) -> Any:
        raise self

    def exception(self, timeout: float | None = None) -> BaseException:
        return self

    def traceback(self, timeout: float | None = None) -> Any:
        return self.__traceback__

    def done(self) -> bool:
        return True

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        callback(self)


class _Replayed:
    """A server-streaming call's answers, read in full before they are handed on."""

    def __init__(self, call: Any, answers: list[Any]) -> None:
        self._call = call
        self._answers = iter(answers)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return next(self._answers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class FaultInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, rules_path: Path) -> None:
        self._rules_path = rules_path
        self._events_path = rules_path.with_name(rules_path.name + ".events")
        self._lock = threading.Lock()
        self._used: dict[str, int] = {}
        self._sequence = 0

    def _rules(self) -> list[Rule]:
        try:
            rules: list[Rule] = json.loads(self._rules_path.read_text())
        except (OSError, ValueError):
            return []
        return rules

    def _match(self, method: str, request: Any) -> tuple[Rule | None, list[str]]:
        fields = sorted(_written_fields(request))
        for rule in self._rules():
            if rule.get("rpc", "*") not in ("*", method):
                continue
            if not set(rule.get("fields", ())) <= set(fields):
                continue
            if "after" in rule and not self._used.get(rule["after"]):
                continue  # active once the rule it follows has applied
            with self._lock:
                used = self._used.get(rule["id"], 0)
                if "times" in rule and used >= rule["times"]:
                    continue
                self._used[rule["id"]] = used + 1
            return rule, fields
        return None, fields

    def _log(self, method: str, fields: list[str], event: str, rule: Rule | None) -> None:
        with self._lock:
            self._sequence += 1
            line = {"seq": self._sequence, "rpc": method, "fields": fields, "event": event, "at": time.time()}
            line["rule"] = rule["id"] if rule else None
            with self._events_path.open("a") as events:
                events.write(json.dumps(line) + "\n")

    def _before(self, method: str, rule: Rule | None, fields: list[str]) -> None:
        """What a rule does before the RPC is sent (its ones that never send it raise)."""
        action = rule["action"] if rule else None
        if action == "fail":
            self._log(method, fields, "failed", rule)
            raise _RpcFailure(grpc.StatusCode.UNAVAILABLE, "cut off by the test")
        if action == "refresh":
            self._log(method, fields, "refresh_failed", rule)
            raise RefreshError("credentials could not be refreshed (injected by the test)")
        if action == "freeze":
            self._log(method, fields, "frozen", rule)
            thawed = self._rules_path.with_name(self._rules_path.name + ".thawed")
            while not thawed.exists():  # only the test's thaw counts, not a stray SIGCONT
                os.kill(os.getpid(), signal.SIGSTOP)
                time.sleep(0.01)
        self._log(method, fields, "sent", rule)

    def _late(self, method: str, rule: Rule | None, fields: list[str], timeout: float | None) -> None:
        """After the answer came: hold it back, or drop it, as the rule says."""
        action = rule["action"] if rule else None
        limit = timeout if timeout is not None else 60.0
        if action == "lose" or (action == "delay" and rule is not None and rule["seconds"] > limit):
            time.sleep(limit)
            self._log(method, fields, "lost", rule)
            raise _RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "answer lost (injected by the test)")
        if action == "delay" and rule is not None:
            time.sleep(rule["seconds"])
        self._log(method, fields, "answered", rule)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        method = _method_name(details)
        rule, fields = self._match(method, request)
        self._before(method, rule, fields)
        outcome = continuation(details, request)  # blocks until answered
        self._late(method, rule, fields, details.timeout)
        return outcome

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        method = _method_name(details)
        rule, fields = self._match(method, request)
        self._before(method, rule, fields)
        call = continuation(details, request)
        if rule is None:
            self._log(method, fields, "answered", rule)
            return call
        answers = list(call)
        self._late(method, rule, fields, details.timeout)
        return _Replayed(call, answers)


def _method_name(details: Any) -> str:
    method = details.method
    return (method.decode() if isinstance(method, bytes) else str(method)).rsplit("/", 1)[-1]


def _written_fields(request: Any) -> set[str]:
    """The fields a Commit's or a BatchWrite's writes set (server timestamps included)."""
    fields: set[str] = set()
    for write in getattr(request, "writes", ()):
        fields.update(write.update.fields.keys())
        fields.update(transform.field_path for transform in write.update_transforms)
    return fields


def _faulty_client(rules_path: Path) -> firestore.Client:
    """The instance's client, built as the SDK builds its emulator channel, intercepted."""
    client = firestore.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT"))
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    channel = grpc.insecure_channel(host, options=[("Authorization", "Bearer owner")])
    intercepted = grpc.intercept_channel(channel, FaultInterceptor(rules_path))
    transport = FirestoreGrpcTransport(host=host, channel=intercepted)
    client._firestore_api_internal = FirestoreClient(transport=transport)
    return client


def _install() -> None:
    rules = os.environ.get(FAULTS_ENV)
    if not rules:
        return
    from exactly_once import decorator

    decorator.firestore_client._build = lambda: _faulty_client(Path(rules))


def _skew_clock() -> None:
    """The instance's wall clock, as the function reads it (ledger.records.utc_now), off by
    INSTANCE_CLOCK_OFFSET_SECONDS: what libfaketime does to a whole process, for one module."""
    offset = os.environ.get(CLOCK_OFFSET_ENV)
    if not offset:
        return
    from exactly_once.ledger import records

    shift = timedelta(seconds=float(offset))

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Skewed:
            moment = datetime.now(tz) + shift
            return cls.fromtimestamp(moment.timestamp(), tz)

    setattr(records, "datetime", Skewed)  # noqa: B010 - a module global, replaced for the process


_install()
_skew_clock()

# --- jobs ------------------------------------------------------------------------------------

_marks_client = OncePerInstance(lambda: firestore.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT")))


def _mark(context: RunContext) -> Any:
    mark = _marks_client().collection(MARKS).document(context.attempt_id)
    mark.set({"run_id": context.run_id, "started_at": firestore.SERVER_TIMESTAMP})
    return mark


def marked_sleep(context: RunContext) -> dict[str, float]:
    """Sleep `seconds` (body), marking the attempt alive all along, whatever its time limit."""
    seconds = float(context.json_body(allowed_fields=("seconds",)).get("seconds", 0))
    mark = _mark(context)
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        mark.update({"alive_at": firestore.SERVER_TIMESTAMP})
        time.sleep(ALIVE_EVERY_SECONDS)
    mark.update({"alive_at": firestore.SERVER_TIMESTAMP, "finished": True})
    return {"slept": seconds}


def checkpointed(context: RunContext) -> dict[str, Any]:
    """Marks the attempt, saves the body's `save` as its checkpoint (if any), then fails when
    the body says `fail` and this is the run's first attempt (`fail: "first"`) or any attempt
    (`fail: true`); answers the checkpoint it resumed from."""
    body = context.json_body(allowed_fields=("save", "fail", "seconds"))
    earlier = len(marks(_marks_client(), context.run_id))
    _mark(context)
    if body.get("save") is not None:
        context.checkpoint(body["save"])
    fail = body.get("fail", False)
    if fail is True or (fail == "first" and earlier == 0):
        raise RuntimeError(f"attempt {earlier + 1} of the run fails (the test asks it to)")
    return {"resumed_from": context.last_checkpoint}


EXITS: dict[str, Callable[[], BaseException]] = {
    "exit": lambda: SystemExit(3),
    "interrupt": lambda: KeyboardInterrupt(),
    "generator": lambda: GeneratorExit(),
}


def exits(context: RunContext) -> None:
    """Marks the attempt, then leaves as the body's `how` says: sys.exit(3), or raising
    KeyboardInterrupt or GeneratorExit."""
    how = str(context.json_body(allowed_fields=("how",)).get("how", "exit"))
    if how not in EXITS:
        raise TerminalJobError(f"how {how!r} is not one of {sorted(EXITS)}")
    _mark(context)
    if how == "exit":
        sys.exit(3)
    raise EXITS[how]()


def huge_output_late(context: RunContext) -> list[str]:
    """Marks the attempt, runs until `left` seconds (body) of its time limit are left, and
    returns about `megabytes` MB of JSON: far more than a run stores."""
    body = context.json_body(allowed_fields=("left", "megabytes"))
    mark = _mark(context)
    while context.seconds_left() > float(body.get("left", 1.0)):
        time.sleep(0.05)
    mark.update({"alive_at": firestore.SERVER_TIMESTAMP, "finished": True})
    return ["x" * 1000] * int(float(body.get("megabytes", 47)) * 1000)


def return_during_renewal(context: RunContext) -> dict[str, bool]:
    """Marks the attempt and returns as soon as a renewal of its lease is on the wire."""
    mark = _mark(context)
    sent = _wait_for_renewal(deadline=60.0)
    mark.update({"alive_at": firestore.SERVER_TIMESTAMP, "finished": True})
    return {"renewal_sent": sent}


def _wait_for_renewal(deadline: float) -> bool:
    rules = os.environ.get(FAULTS_ENV)
    if not rules:
        return False
    faults = Faults.__new__(Faults)
    faults.events_path = Path(rules).with_name(Path(rules).name + ".events")

    def renewals_sent() -> int:
        return sum(is_renewal(event) and event["event"] == "sent" for event in faults.events())

    earlier = renewals_sent()  # of attempts before this one
    ends = time.monotonic() + deadline
    while time.monotonic() < ends:
        if renewals_sent() > earlier:
            return True
        time.sleep(0.02)
    return False


def is_renewal(event: dict[str, Any]) -> bool:
    return bool(event["rpc"] == "Commit" and event["fields"] == ["renewed_at"])


def is_completion(event: dict[str, Any]) -> bool:
    return bool(event["rpc"] == "Commit" and "completed_at" in event["fields"])


# --- the test's side ---------------------------------------------------------------------------

REPO_ROOT = str(Path(__file__).resolve().parents[2])


def instance_env(emulator_host: str, project: str, faults: Faults, job: str, **extra: str) -> dict[str, str]:
    """A served function whose job is `job` of this module and whose client `faults` rules."""
    return {
        "FIRESTORE_EMULATOR_HOST": emulator_host,
        "GOOGLE_CLOUD_PROJECT": project,
        "JOB_HANDLER": f"tests.support.faulty_instance:{job}",
        "PYTHONPATH": REPO_ROOT,
        "THREADS": "8",
        **faults.env,
        **extra,
    }


def marks(db: Any, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every attempt's mark (of the run `run_id`, if given), with its attempt id."""
    found = [{"attempt_id": doc.id, **(doc.to_dict() or {})} for doc in db.collection(MARKS).stream()]
    return [mark for mark in found if run_id is None or mark.get("run_id") == run_id]


def warm_up(url: str, headers: dict[str, str]) -> None:
    """Deliver another run (`headers` name it) until it is executed, before the faults are
    set: an emulator's first answers in a new project may take longer than a scaled-down
    lease allows an RPC, and the instance's channel is up afterwards."""
    import requests

    ends = time.monotonic() + 60
    outcomes: list[str] = []
    while time.monotonic() < ends:
        outcome = requests.post(url, headers=headers, json={"seconds": 0}, timeout=60).json()["outcome"]
        outcomes.append(outcome)
        if outcome in ("executed", "duplicate_completed", "lease_taken_over"):
            return
        if outcome not in ("store_error", "in_progress"):
            break  # no retry changes it
        time.sleep(0.2)
    raise AssertionError(f"the warm-up run was never executed: {outcomes}")


def process_running(pid: int) -> bool:
    """Whether the process exists and has not exited (a stopped one has not). Linux /proc."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def process_stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (SIGSTOP). Linux /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


class GoneWatch:
    """Writes, on Firestore's clock, when the test sees a process ended: just after it ended."""

    COLLECTION = "process_ends"

    def __init__(self, db: Any, pid: int, name: str, *, watch_seconds: float = 120.0) -> None:
        self._db, self._pid, self._name = db, pid, name
        self._watch_seconds = watch_seconds
        self._thread = threading.Thread(target=self._record, daemon=True)
        self._thread.start()

    def _record(self) -> None:
        deadline = time.monotonic() + self._watch_seconds
        while process_running(self._pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not process_running(self._pid):
            self._db.collection(self.COLLECTION).document(self._name).set({"at": firestore.SERVER_TIMESTAMP})

    def gone_at(self) -> Any:
        self._thread.join(timeout=self._watch_seconds + 30)
        seen = self._db.collection(self.COLLECTION).document(self._name).get()
        assert seen.exists, f"process {self._pid} never ended"
        return seen.to_dict()["at"]


def touches_faulthandler(context: RunContext) -> dict[str, bool]:
    """Marks the attempt, then does what a library might: disarms faulthandler's timer and
    arms it for ten minutes without exiting, the process's one timer either way."""
    import faulthandler

    _mark(context)
    faulthandler.cancel_dump_traceback_later()
    faulthandler.dump_traceback_later(600, exit=False)
    return {"touched": True}
