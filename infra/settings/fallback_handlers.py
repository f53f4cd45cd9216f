"""Which jobs run the stack's `jobHandler`, said where the config leaves it unsaid.

A job without a `handler` of its own (and without a target, whose kind names its proxy) runs
the stack's `jobHandler`. That is convenient for a stack of like jobs, and a trap for a job
copied from another stack: it runs whatever that stack's fallback is, a job that does nothing
among them, and nothing in its own entry says so. These advisories name, for each such job,
the handler it will run; `make check` prints them beside the timing advisories.
"""

from __future__ import annotations

from infra.settings.stack import StackSettings


def fallback_advisories(settings: StackSettings) -> list[str]:
    """One line per job that falls back to `jobHandler`, naming its key and that handler."""
    return [
        f"{settings.config_key(f'jobs[{index}].handler')}: job {job.name!r} sets no handler, so it runs "
        f"the stack's {settings.config_key('jobHandler')}, {settings.job_handler!r}; set its own "
        "handler to say what it runs"
        for index, job in enumerate(settings.jobs)
        if job.handler is None
    ]
