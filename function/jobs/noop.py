"""A job that does nothing: measures the dedup machinery alone (tests, benchmark)."""

from exactly_once import RunContext


def do_nothing(context: RunContext) -> None:
    del context
