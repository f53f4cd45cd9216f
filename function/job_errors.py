"""The two exceptions a job raises to say how its failure should be treated.

Any exception is a failure; these two name the decision, so a job's author never has to know
which HTTP status makes Cloud Scheduler retry:

- TerminalJobError: retrying cannot help. The run is recorded as completed with the error
  (`failed_terminal`, 200) and Cloud Scheduler stops.
- RetryableJobError (or any other exception): the claim is released and the delivery is
  answered 500 (`failed_released`), so Cloud Scheduler retries the run with the same run_id.
"""

from __future__ import annotations


class TerminalJobError(Exception):
    """The run cannot succeed by retrying (bad input, a 4xx from downstream)."""


class RetryableJobError(Exception):
    """The run may succeed later (a 5xx or a timeout downstream): retry it."""
