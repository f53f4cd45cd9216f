"""A job's standard-library logging as structured lines carrying its delivery's fields."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from typing import Any

import pytest

from exactly_once import structured_log
from exactly_once.job_logging import StructuredLogHandler, install, severity_of
from exactly_once.log_fields import LABELS


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    """A root logger of our own, so that the test neither sees nor changes the process's."""
    logger = logging.RootLogger(logging.WARNING)
    manager = logging.Manager(logger)
    logger.manager = manager
    yield logger


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_install_adds_one_handler_and_keeps_info_lines(root: logging.Logger) -> None:
    assert install(root) is True and install(root) is True
    assert [type(handler) for handler in root.handlers] == [StructuredLogHandler]
    assert root.level == logging.INFO


def test_a_process_that_configured_logging_keeps_its_own(root: logging.Logger) -> None:
    own = logging.StreamHandler(io.StringIO())
    root.addHandler(own)
    assert install(root) is False
    assert root.handlers == [own] and root.level == logging.WARNING


def test_a_record_in_a_delivery_carries_its_fields_and_severity(root: logging.Logger) -> None:
    install(root)
    out = io.StringIO()
    with redirect_stdout(out), structured_log.delivery_fields() as fields:
        fields[LABELS] = {"run_id": "r1", "job": "nightly"}
        root.info("rows %d", 12)
        try:
            raise ValueError("bad row")
        except ValueError:
            root.exception("failed")
    info, error = _lines(out)
    assert info == {
        "severity": "INFO",
        "message": "rows 12",
        "logger": "root",
        LABELS: {"run_id": "r1", "job": "nightly"},
    }
    assert error["severity"] == "ERROR" and error[LABELS]["run_id"] == "r1"
    assert "ValueError: bad row" in error["exception"]


def test_outside_a_delivery_only_warnings_are_written(root: logging.Logger) -> None:
    install(root)
    out = io.StringIO()
    with redirect_stdout(out):
        root.info("chatter")
        root.warning("careful")
    assert [(line["severity"], line["message"], LABELS in line) for line in _lines(out)] == [
        ("WARNING", "careful", False)
    ]


def test_concurrent_deliveries_each_label_their_own_lines(root: logging.Logger) -> None:
    install(root)
    out = io.StringIO()
    barrier = threading.Barrier(8)

    def deliver(run: int) -> None:
        with structured_log.delivery_fields() as fields:
            fields[LABELS] = {"run_id": f"run-{run}", "job": "j"}
            barrier.wait(timeout=30)
            for line in range(20):
                root.info("run %d line %d", run, line)

    previous, sys.stdout = sys.stdout, out
    try:
        threads = [threading.Thread(target=deliver, args=(run,)) for run in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.stdout = previous
    lines = _lines(out)
    assert len(lines) == 160
    assert all(line["message"].startswith(f"{line[LABELS]['run_id'].replace('-', ' ')} ") for line in lines)


@pytest.mark.parametrize(
    ("level", "severity"),
    [
        (logging.DEBUG, "DEBUG"),
        (15, "DEBUG"),
        (logging.INFO, "INFO"),
        (logging.CRITICAL, "CRITICAL"),
        (1, "DEFAULT"),
    ],
)
def test_levels_map_to_cloud_logging_severities(level: int, severity: str) -> None:
    assert severity_of(level) == severity
