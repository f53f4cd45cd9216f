"""One place ends a claimed attempt: every ledger write a delivery makes (claim, renew,
complete, release, give back) is called from exactly one place in the function package and
`ops/`, outside the ledger itself. A check before the job, or the job, comes to an ending value
(delivery/endings.py), and the finisher (delivery/finishing.py) writes it. A second call site of a
write is how a path used to decide an ending on its own (a give-back that forgot the checkpoint,
a skip that was not conditioned on what decided it). Read from the source, so the rule holds for
code no test runs."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from policy.scheduler_guardrails.rules.config.python_source import parse_python, parse_python_file
from tests.support.sources import python_sources

REPO_ROOT = Path(__file__).resolve().parents[3]
SOURCES = (REPO_ROOT / "function" / "exactly_once", REPO_ROOT / "ops")
# The ledger's own module calls its writes to retry them and to give back a claim it confirmed
# too late; the token check's records are idempotency tokens, with writes of their own.
LEDGER_ITSELF = (
    REPO_ROOT / "function" / "exactly_once" / "ledger" / "protocol.py",
    REPO_ROOT / "function" / "exactly_once" / "token_check",
)
WRITES = ("claim", "renew", "complete", "release", "give_back")


def calls(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """Each call of a ledger write: `<something ledger>.<write>(...)`."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in WRITES
            and _is_ledger(node.func.value)
        ):
            yield node.func.attr, node.lineno


def _is_ledger(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lstrip("_").endswith("ledger")


def call_sites() -> dict[str, list[str]]:
    sites: dict[str, list[str]] = defaultdict(list)
    for root in SOURCES:
        for path in python_sources(root):
            if any(path == other or path.is_relative_to(other) for other in LEDGER_ITSELF):
                continue
            for write, line in calls(parse_python_file(path)):
                sites[write].append(f"{path.relative_to(REPO_ROOT)}:{line}")
    return dict(sites)


def test_each_ledger_write_has_one_call_site() -> None:
    sites = call_sites()
    assert set(sites) == set(WRITES)
    assert {write: where for write, where in sites.items() if len(where) != 1} == {}
    assert all(
        where[0].startswith("function/exactly_once/delivery/finishing.py")
        for write, where in sites.items()
        if write in ("complete", "release", "give_back")
    )


def test_the_rule_finds_a_second_call_site() -> None:
    source = "def a(self):\n    self._ledger.give_back(claim)\n\ndef b(ledger):\n    ledger.give_back(c)\n"
    assert [write for write, _ in calls(parse_python(source))] == ["give_back", "give_back"]
    assert list(calls(parse_python("self._tokens.complete(token)"))) == []
