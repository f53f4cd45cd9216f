"""Completed runs an instance has seen, answered from memory.

A completed run never changes again (until its record's retention ends), so a duplicate of it
needs no Firestore read at all: the instance that completed it, or saw it completed, answers
from this cache with zero RPCs, even while Firestore is unreachable. Cloud Scheduler's retries
of one run tend to reach the same instance, and so does a burst of duplicates.

Bounded by entries and by the bytes of stored outputs, least recently used first out, so a
job with large outputs cannot grow an instance's memory without limit. An entry is forgotten
before the record's own retention could end, so a run past retention is decided by the ledger.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_ENTRIES = 4096
MAX_OUTPUT_BYTES_TOTAL = 16 * 1024 * 1024


@dataclass(frozen=True)
class CompletedRun:
    result: str  # JobResult value: succeeded, terminal_failure, overlap_skipped
    output_json: str | None
    error: str | None
    valid_until: float  # monotonic seconds


class CompletedRuns:
    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_OUTPUT_BYTES_TOTAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries: OrderedDict[str, CompletedRun] = OrderedDict()
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()

    def get(self, run_id: str) -> CompletedRun | None:
        with self._lock:
            entry = self._entries.get(run_id)
            if entry is None:
                return None
            if entry.valid_until <= self._clock():
                self._drop(run_id)
                return None
            self._entries.move_to_end(run_id)
            return entry

    def remember(
        self, run_id: str, result: str, output_json: str | None, error: str | None, valid_for: float
    ) -> None:
        if valid_for <= 0:
            return
        entry = CompletedRun(result, output_json, error, self._clock() + valid_for)
        with self._lock:
            if run_id in self._entries:
                self._drop(run_id)
            self._entries[run_id] = entry
            self._bytes += _size(entry)
            while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
                self._drop(next(iter(self._entries)))

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, run_id: str) -> None:
        self._bytes -= _size(self._entries.pop(run_id))


def _size(entry: CompletedRun) -> int:
    return len(entry.output_json or "") + len(entry.error or "")
