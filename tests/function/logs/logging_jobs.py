"""A job that logs the way people write jobs: a module logger, the root logger, an exception
and a print; served by a real Functions Framework process
(JOB_HANDLER=tests.function.logs.logging_jobs:log_a_little, the repository root on PYTHONPATH)."""

from __future__ import annotations

import logging

from exactly_once import RunContext

logger = logging.getLogger(__name__)


def log_a_little(context: RunContext) -> dict[str, bool]:
    logger.info("working on %s", context.run_id)
    logging.warning("the root logger, at module level")
    try:
        raise ValueError("a row could not be read")
    except ValueError:
        logger.exception("skipped a row")
    print("a plain print", flush=True)
    return {"logged": True}
