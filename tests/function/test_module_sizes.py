"""No module of the function's package passes 450 lines: one concern each, read in one sitting.
A module that grows past it holds two concerns, and splits where they part (the lifecycle's
table, its claims and its verdicts; the audit's state, budget and judging)."""

from __future__ import annotations

from pathlib import Path

from tests.support.sources import python_sources

PACKAGE = Path(__file__).resolve().parents[2] / "function" / "exactly_once"
MAX_LINES = 450


def test_every_module_of_the_package_is_at_most_450_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in python_sources(PACKAGE)
    }
    assert {name: lines for name, lines in sizes.items() if lines > MAX_LINES} == {}
    assert len(sizes) > 50  # the package, not an empty folder
