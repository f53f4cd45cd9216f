"""The warm cache's memory bound, measured: what it counts is what its entries take."""

from __future__ import annotations

import gc
import json
import tracemalloc

from exactly_once.delivery.warm_cache import ENTRY_OVERHEAD_BYTES, CompletedRuns
from exactly_once.errors import MAX_ERROR_BYTES, TerminalJobError
from tests.support.instances import Instance

ASTRAL = "\U0001f600"  # outside the BMP: four bytes in UTF-8, and in a Python str


def astral_output(index: int, ascii_characters: int) -> str:
    """A JSON string of one astral character and many ASCII ones: as a Python str every
    character takes four bytes, as UTF-8 almost all take one."""
    return json.dumps(f"{ASTRAL}{index:08d}" + "x" * ascii_characters, ensure_ascii=False)


def run_id(index: int) -> str:
    return f"{index:064x}"  # the shape of a real run id


def test_counted_bytes_are_the_utf8_size_of_the_outputs_plus_the_entry_overhead():
    cache = CompletedRuns()
    outputs = [json.dumps(ASTRAL * n, ensure_ascii=False) for n in (0, 1, 1000)] + [None]
    for index, output in enumerate(outputs):
        cache.remember(run_id(index), "succeeded", output, 60)
    encoded = sum(len(output.encode("utf-8")) for output in outputs if output is not None)
    assert encoded == 2 + 6 + 4002
    assert cache.bytes_counted == encoded + len(outputs) * ENTRY_OVERHEAD_BYTES
    entry = cache.get(run_id(2))
    assert entry is not None and entry.output_json == outputs[2]  # answered as it was stored


def test_the_bound_holds_in_measured_memory_for_astral_outputs():
    """Far more outputs than fit: the cache keeps what fits in max_bytes, and the memory it
    really holds (tracemalloc, after the outputs passed in are gone) stays within it."""
    max_bytes = 1024 * 1024
    ascii_characters = 16 * 1024
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        cache = CompletedRuns(max_bytes=max_bytes)
        for index in range(300):
            cache.remember(run_id(index), "succeeded", astral_output(index, ascii_characters), 60)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    kept = len(cache)
    per_entry = len(astral_output(0, ascii_characters).encode("utf-8")) + ENTRY_OVERHEAD_BYTES
    assert kept == max_bytes // per_entry  # full: the newest outputs, as many as fit
    assert cache.bytes_counted == kept * per_entry <= max_bytes
    assert cache.get(run_id(299)) is not None and cache.get(run_id(0)) is None
    assert held <= max_bytes, f"{kept} entries hold {held} bytes against a bound of {max_bytes}"


def test_a_terminal_failure_keeps_its_recorded_reason_bounded_and_counted(emulator_host, project):
    """A duplicate's answer carries the recorded reason, so the cache keeps it: the text the
    ledger recorded, cut to MAX_ERROR_BYTES whatever the job raised, and counted in bytes."""

    def fails_with_a_long_message(run: object) -> None:
        raise TerminalJobError(ASTRAL * 50_000)

    cache_of = Instance(emulator_host, project, fails_with_a_long_message)
    failed = cache_of.deliver().body
    assert failed["outcome"] == "failed_terminal"
    recorded = failed["error"].encode()
    assert len(recorded) <= MAX_ERROR_BYTES
    assert len(cache_of.cache) == 1
    assert cache_of.cache.bytes_counted == ENTRY_OVERHEAD_BYTES + len(recorded)
    duplicate = cache_of.deliver()
    assert (duplicate.body["outcome"], cache_of.cost()) == ("duplicate_completed", 0)
    assert duplicate.body["error"] == failed["error"]
