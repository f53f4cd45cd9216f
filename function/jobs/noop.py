"""A job that does nothing: measures the dedup machinery alone (tests, benchmark)."""

from job_api import RunContext


def do_nothing(context: RunContext) -> None:
    del context
