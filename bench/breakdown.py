"""Where one delivery's time goes over HTTP, part by part: the breakdown table.

Ours is served probed (bench/probed_main.py, bench/probes.py) as two instances, like the HTTP
rows' (bench/over_http.py): fresh runs are delivered to instance A (a first delivery), then
to B (a duplicate at another instance). Every part is measured in the served process on the
same delivery whose total the caller timed; the caller's part is what is left of that total.
Beside them, `floor`: a Functions Framework function that answers at once, served and called
the same way, i.e. what any function pays for being served over HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import probes as p
from bench.inprocess import Progress
from bench.over_http import WARM_UP_RUNS, Instance, served_pair
from bench.stats import Summary
from localrun.function_server import FunctionServer

PROBED_SOURCE = Path(__file__).resolve().parent / "probed_main.py"
FLOOR_TARGET = "floor"
# How long the last record may take to arrive: it is kept after the answer is written.
RECORDS_WAIT_SECONDS = 10.0

Part = Callable[[Mapping[str, int], int], int]


def _get(record: Mapping[str, int], *names: str) -> int:
    return sum(record.get(name, 0) for name in names)


def _claim_wait(record: Mapping[str, int]) -> int:
    """The RPC waits inside the claim: all of them when nothing completed (a duplicate)."""
    return _get(record, p.CLAIM_RPC_WAIT) if p.COMPLETE in record else _get(record, p.RPC_WAIT)


_IN_HANDLE = (
    p.CHECKS,
    p.CLAIM,
    p.WATCH_START,
    p.JOB,
    p.WATCH_END,
    p.ENCODE_OUTPUT,
    p.COMPLETE,
    p.REMEMBER,
    p.LOG_LINE,
)

# (part, what it is, how it is computed from a record and the caller's total in ns).
PARTS: tuple[tuple[str, str, Part], ...] = (
    (
        "caller and loopback",
        "the client's request and reading of the answer, both ways over loopback TCP",
        lambda r, total: total - _get(r, p.QUEUED, p.WORKER),
    ),
    (
        "server: main loop to worker thread",
        "gunicorn's event loop sees the request and hands it to a worker thread",
        lambda r, total: _get(r, p.QUEUED),
    ),
    (
        "server: HTTP parsing",
        "gunicorn reads and parses the request line and headers",
        lambda r, total: _get(r, p.WORKER) - _get(r, p.SERVE),
    ),
    (
        "server: WSGI environ, writing the answer",
        "gunicorn builds the WSGI environ, then sends the status, headers and body",
        lambda r, total: _get(r, p.SERVE) - _get(r, p.WSGI),
    ),
    (
        "Flask and the Functions Framework",
        "request context, routing, execution id, the framework's view wrapper",
        lambda r, total: _get(r, p.WSGI) - _get(r, p.VIEW),
    ),
    (
        "our view: body and headers",
        "decorator.py: the handler looked up, the body read, the headers copied",
        lambda r, total: _get(r, p.VIEW) - _get(r, p.HANDLE, p.ANSWER),
    ),
    (
        "header and body checks",
        "Content-Length against the body, the Scheduler headers, Cache-Control, the warm cache",
        lambda r, total: _get(r, p.CHECKS),
    ),
    (
        "claim and completion: Firestore's answers",
        "gRPC's blocking calls: each RPC sent, its answer awaited (the round trip, the emulator) and read",
        lambda r, total: _get(r, p.RPC_WAIT),
    ),
    (
        "claim",
        "the claim besides waiting for its RPC: the ledger and the client library",
        lambda r, total: _get(r, p.CLAIM) - _claim_wait(r),
    ),
    (
        "heartbeat and watchdog: set-up",
        "the backstop timer armed, the attempt handed to a lease watcher",
        lambda r, total: _get(r, p.WATCH_START),
    ),
    ("job", "the no-op job, through the job router", lambda r, total: _get(r, p.JOB)),
    (
        "heartbeat and watchdog: tear-down",
        "the watcher told the attempt ended, the backstop timer cancelled",
        lambda r, total: _get(r, p.WATCH_END),
    ),
    ("output", "the job's return value checked and encoded", lambda r, total: _get(r, p.ENCODE_OUTPUT)),
    (
        "completion",
        "the completing write besides waiting for its RPC: the ledger and the client library",
        lambda r, total: _get(r, p.COMPLETE) - (_get(r, p.RPC_WAIT) - _claim_wait(r)),
    ),
    ("warm cache entry", "the completed run remembered", lambda r, total: _get(r, p.REMEMBER)),
    ("log line", "one JSON line: encoded, written, flushed", lambda r, total: _get(r, p.LOG_LINE)),
    (
        "rest of the handler",
        "run key, fingerprint, attempt id, run context, answer's fields",
        lambda r, total: _get(r, p.HANDLE) - _get(r, *_IN_HANDLE),
    ),
    ("answer", "the JSON body and the Flask response", lambda r, total: _get(r, p.ANSWER)),
)


# How long the waiting floor function sleeps: about as long as ours waits for Firestore at RTT 10.
FLOOR_WAIT_MS = 20
FIRST_KIND, ELSEWHERE_KIND, FLOOR_KIND, WAITING_FLOOR_KIND = (
    "first delivery",
    "duplicate at another instance",
    "a function that does nothing",
    f"a function that sleeps {FLOOR_WAIT_MS} ms",
)
KINDS = (FIRST_KIND, ELSEWHERE_KIND, FLOOR_KIND, WAITING_FLOOR_KIND)
FLOORS = {FLOOR_KIND: "/", WAITING_FLOOR_KIND: f"/?wait_ms={FLOOR_WAIT_MS}"}


@dataclass(frozen=True)
class Breakdown:
    """One RTT's breakdown: per kind of request, each part's summary (ms) over the requests,
    and the caller's total."""

    rtt_ms: float
    parts: dict[str, dict[str, Summary]]  # kind -> part -> summary
    totals: dict[str, Summary]  # kind -> the caller's total

    def as_json(self) -> dict[str, object]:
        return {
            "rtt_ms": self.rtt_ms,
            "parts": {
                kind: {part: asdict(summary) for part, summary in parts.items()}
                for kind, parts in self.parts.items()
            },
            "totals": {kind: asdict(summary) for kind, summary in self.totals.items()},
        }


def parts_of(records: Sequence[Mapping[str, int]], totals_ns: Sequence[int]) -> dict[str, Summary]:
    """Each part's summary (ms) over requests: the records paired with the caller's totals."""
    if len(records) != len(totals_ns):
        raise ValueError(f"{len(records)} probe records for {len(totals_ns)} requests")
    pairs = list(zip(records, totals_ns, strict=True))
    return {part: Summary.of([compute(r, total) / 1e6 for r, total in pairs]) for part, _, compute in PARTS}


def _records(instance: Instance, expected: int) -> list[dict[str, int]]:
    """The records of the `expected` requests since the last fetch. The last one is kept just
    after its answer was written, so it may come a moment later."""
    records: list[dict[str, int]] = []
    deadline = time.monotonic() + RECORDS_WAIT_SECONDS
    while True:
        records += json.loads(instance.get(p.RECORDS_PATH))
        if len(records) >= expected or time.monotonic() > deadline:
            return records
        time.sleep(0.01)


def measure(
    env: Mapping[str, str],
    emulator_host: str,
    rtt_ms: float,
    log_dir: Path,
    deliveries: int,
    progress: Progress,
) -> Breakdown:
    progress(f"breakdown at RTT {rtt_ms:g} ms: {deliveries} probed requests of each kind")
    totals: dict[str, list[int]] = {kind: [] for kind in KINDS}
    records: dict[str, list[dict[str, int]]] = {}
    with served_pair("probed", PROBED_SOURCE, env, emulator_host, rtt_ms, log_dir, count=False) as pair:
        pair.warm_up()
        kinds = ((FIRST_KIND, pair.here), (ELSEWHERE_KIND, pair.there))
        for _, instance in kinds:
            instance.get(p.RECORDS_PATH)  # the warm-up's records
        for _ in range(deliveries):
            headers = pair.runs.headers()
            for kind, instance in kinds:
                totals[kind].append(_timed(instance, headers, kind))
        records.update({kind: _records(instance, deliveries) for kind, instance in kinds})
    server = FunctionServer(env, log_dir / "floor.log", source=PROBED_SOURCE, target=FLOOR_TARGET)
    server.start()
    try:
        floor = Instance(server)
        try:
            for kind, path in FLOORS.items():
                for _ in range(WARM_UP_RUNS):
                    floor.post({}, path)
                floor.get(p.RECORDS_PATH)
                totals[kind] = [_timed(floor, {}, kind, path) for _ in range(deliveries)]
                records[kind] = _records(floor, deliveries)
        finally:
            floor.close()
    finally:
        server.stop()
    return Breakdown(
        rtt_ms,
        {kind: parts_of(records[kind], totals[kind]) for kind in KINDS},
        {kind: Summary.of([t / 1e6 for t in totals[kind]]) for kind in KINDS},
    )


def _timed(instance: Instance, headers: Mapping[str, str], kind: str, path: str = "/") -> int:
    answer = instance.post(headers, path)
    if answer.status != 200:
        raise RuntimeError(f"probed {kind} answered {answer.status}: {answer.body[:300]!r}")
    return round(answer.seconds * 1e9)


def markdown(breakdowns: Sequence[Breakdown]) -> list[str]:
    """The table: one row per part, a column per kind of request and RTT (medians, ms)."""
    if not breakdowns:
        return []
    columns = [(b, kind) for b in breakdowns for kind in KINDS if kind not in FLOORS or b is breakdowns[0]]
    header = " | ".join(kind if kind in FLOORS else f"{kind}, RTT {b.rtt_ms:g} ms" for b, kind in columns)
    lines = [
        "### Where one delivery's time goes over HTTP (ours, probed: `bench/probes.py`)",
        "",
        "Medians over the probed requests, in ms; a part's median is taken on its own, so the "
        "parts' medians need not add up to the total's.",
        "",
        f"| Part | What it is | {header} |",
        "| --- | --- | " + " | ".join("---" for _ in columns) + " |",
    ]
    for part, what, _ in PARTS:
        cells = " | ".join(f"{b.parts[kind][part].median:.3f}" for b, kind in columns)
        lines.append(f"| {part} | {what} | {cells} |")
    totals = " | ".join(f"**{b.totals[kind].median:.3f}**" for b, kind in columns)
    lines.append(f"| **total, as the caller timed it** | | {totals} |")
    return lines
