"""Completed runs an instance has seen, answered from memory.

A completed run never changes again (until its record's retention ends), so a duplicate of it
needs no Firestore read at all: the instance that completed it, or saw it completed, answers
from this cache with zero RPCs, even while Firestore is unreachable. Cloud Scheduler's retries
of one run tend to reach the same instance, and so does a burst of duplicates.

Bounded by entries and by bytes, least recently used first out, so a job with large outputs
cannot grow an instance's memory without limit. An entry keeps only what a duplicate's answer
uses (the result, and the output and a terminal failure's recorded reason as UTF-8 bytes): a
Python str of one astral character takes four bytes per character however many of its others
are ASCII, while the UTF-8 bytes take exactly what they count. Each entry is counted as its
output's and reason's bytes plus a fixed overhead for the key, the entry and its slot. An
entry is forgotten before the record's own retention could end, so a run past retention is
decided by the ledger.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_ENTRIES = 4096
MAX_BYTES_TOTAL = 16 * 1024 * 1024
# What an entry costs besides its output: the 64-character run id, the entry, its result
# string, its 32-byte body fingerprint and its slot in the ordered dict. Measured with
# tracemalloc at 310 to 330 bytes on CPython 3.11 and 3.12 before the fingerprint (about 65
# more); rounded up so the count bounds the real memory.
ENTRY_OVERHEAD_BYTES = 512


@dataclass(frozen=True, slots=True)
class CompletedRun:
    result: str  # JobResult value: succeeded, terminal_failure, overlap_skipped
    output_utf8: bytes | None
    valid_until: float  # monotonic seconds
    # SHA-256 of the body that ran the job (empty when unknown): a duplicate with other bytes
    # is flagged, even when answered from memory.
    fingerprint: bytes = b""
    # A terminal failure's recorded reason (error_text bounds it), which its duplicates are answered.
    error_utf8: bytes | None = None

    @property
    def output_json(self) -> str | None:
        return None if self.output_utf8 is None else self.output_utf8.decode("utf-8")

    @property
    def error(self) -> str | None:
        return None if self.error_utf8 is None else self.error_utf8.decode("utf-8")

    @property
    def size(self) -> int:
        """The bytes this entry is counted as."""
        return ENTRY_OVERHEAD_BYTES + len(self.output_utf8 or b"") + len(self.error_utf8 or b"")


class CompletedRuns:
    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES_TOTAL,
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
        self,
        run_id: str,
        result: str,
        output_json: str | None,
        valid_for: float,
        *,
        fingerprint: str = "",
        error: str | None = None,
    ) -> None:
        if valid_for <= 0:
            return
        output_utf8 = None if output_json is None else output_json.encode("utf-8")
        error_utf8 = None if error is None else error.encode("utf-8")
        valid_until = self._clock() + valid_for
        entry = CompletedRun(result, output_utf8, valid_until, bytes.fromhex(fingerprint), error_utf8)
        with self._lock:
            if run_id in self._entries:
                self._drop(run_id)
            self._entries[run_id] = entry
            self._bytes += entry.size
            while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
                self._drop(next(iter(self._entries)))

    @property
    def bytes_counted(self) -> int:
        """What the entries are counted as, against max_bytes."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, run_id: str) -> None:
        self._bytes -= self._entries.pop(run_id).size
