"""How much one audit reads: as many pages of records as the time its attempt has left allows.

An audit that reads past its time limit is ended by the watchdog and completes nothing: its run
stays in progress with no output, and the next audit has no horizon to continue from. A budget
counted in runs cannot know how fast Firestore answers today (a batched get of one page takes a
few hundred milliseconds, or seconds when Firestore is slow), so the budget is time: each page's
read is measured, and the next page is read only while the slowest so far still fits in the
share of the attempt the audit judges for. A slow Firestore makes one audit judge less, never
nothing: its first page is always read, and where it stopped is where the next one starts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

from exactly_once.audit.missed_runs import RecordReader
from exactly_once.ledger.lifecycle import StoredRecord

# The share of the time its attempt has left when it starts that an audit spends reading and
# judging; the rest is for catch-up's hand-overs, the completing write, and a Firestore slower
# than the reads measured.
JUDGING_SHARE = 0.5
# Ids per batched get: what one measured read takes (audit/reads.py pages by the same size).
PAGE_IDS = 500


class ReadDeadline:
    """When an audit stops reading: `seconds` from now on `monotonic` (inf: never). Every read
    through `reader` is measured; `fits_another` says whether one more as slow as the slowest
    ends in time."""

    def __init__(self, seconds: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._ends = monotonic() + seconds
        self.slowest = 0.0
        self.reads = 0

    @classmethod
    def for_attempt(
        cls, ends_at: float | None, monotonic: Callable[[], float] = time.monotonic
    ) -> ReadDeadline:
        """The deadline of an audit whose attempt ends at `ends_at` on `monotonic` (None: never):
        JUDGING_SHARE of the time it has left."""
        if ends_at is None:
            return cls(math.inf, monotonic)
        return cls(max(0.0, ends_at - monotonic()) * JUDGING_SHARE, monotonic)

    def fits_another(self) -> bool:
        return self._monotonic() + self.slowest <= self._ends

    def reader(self, read: RecordReader) -> RecordReader:
        """`read`, measured."""

        def measured(run_ids: Sequence[str]) -> Mapping[str, StoredRecord]:
            started = self._monotonic()
            try:
                return read(run_ids)
            finally:
                self.reads += 1
                self.slowest = max(self.slowest, self._monotonic() - started)

        return measured

    def read_pages(self, read: RecordReader, run_ids: Sequence[str]) -> tuple[dict[str, StoredRecord], int]:
        """The records among `run_ids`, a page at a time while another page fits (the first page
        always); and how many of the ids, from the first, were read."""
        found: dict[str, StoredRecord] = {}
        measured = self.reader(read)
        done = 0
        while done < len(run_ids) and (done == 0 or self.fits_another()):
            page = run_ids[done : done + PAGE_IDS]
            found.update(measured(page))
            done += len(page)
        return found, done
