"""A job's own `logging` calls, as structured lines of its run.

A job that logs with the standard library (`logging.getLogger(__name__).info(...)`) would
otherwise write nothing at all (the root logger has no handler and drops INFO), or plain text
that names neither the run nor the job. Installed once per instance, this handler writes each
record through structured_log.emit: the record's level as the line's severity, its message, the
logger's name, any exception's traceback, and the delivery's trace and labels, so "what did my
job log during run X" is one Logs Explorer filter. `print` is untouched.

Outside a delivery (at import, in a thread the job started) only warnings and errors are
written, as the standard library's last-resort handler would: the threshold lowered to INFO
for a job's lines must not turn every library's chatter into log entries.

A process that configured logging itself (a handler on the root logger before the function was
imported) keeps its own configuration: nothing is added.
"""

from __future__ import annotations

import logging
from typing import Final

from exactly_once import structured_log
from exactly_once.errors import error_text

LOGGER: Final = "logger"
EXCEPTION: Final = "exception"
# Cloud Logging's severities for the standard library's levels; a level in between takes the
# one below it.
_SEVERITIES: Final = (
    (logging.CRITICAL, "CRITICAL"),
    (logging.ERROR, "ERROR"),
    (logging.WARNING, "WARNING"),
    (logging.INFO, "INFO"),
    (logging.DEBUG, "DEBUG"),
)


def severity_of(level: int) -> str:
    return next((severity for floor, severity in _SEVERITIES if level >= floor), "DEFAULT")


class StructuredLogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and not structured_log.in_delivery():
            return
        try:
            fields = {LOGGER: record.name}
            if record.exc_info:
                fields[EXCEPTION] = error_text(logging.Formatter().formatException(record.exc_info))
            structured_log.emit(severity_of(record.levelno), record.getMessage(), fields)
        except Exception:  # a record that cannot be formatted: logging's own report, never a raise
            self.handleError(record)


def install(root: logging.Logger | None = None) -> bool:
    """Add the handler to the root logger, once, unless logging is configured already; the
    root's default threshold (WARNING) becomes INFO, so a job's info lines are kept. Returns
    whether it was installed."""
    root = root if root is not None else logging.getLogger()
    if root.handlers:
        return any(isinstance(handler, StructuredLogHandler) for handler in root.handlers)
    root.addHandler(StructuredLogHandler())
    if root.level == logging.WARNING:
        root.setLevel(logging.INFO)
    return True
