"""The contract between the function and whatever deploys, checks or documents it is spelt
once, in the function's package: no file of the stack, the policy pack or the doc tools
writes one of its names or defaults again as a literal.

The contract is read from the package itself, not from a list kept here: every public
module-level `*_ENV` name of `exactly_once` (the variables the function reads, and those it
hands to a Cloud Run job's executions), every public `DEFAULT_*` string (the collections, the
database, the default handler) and the text of every public compiled pattern (what
HANDLER_PATTERN accepts, the resource names). A copy of one of those drifts silently the day
the function changes it, so whoever needs the value imports it.

The rule the scan applies: a string constant in code, compared whole, is a spelling. The
constant parts of an f-string count too (`f"{x}LEASE_SECONDS"` spells it). Docstrings do not:
prose may name a variable, and a comment is not code at all.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import exactly_once
from infra.config.schema import REPO_ROOT
from tests.support.sources import python_sources, string_constants

SCANNED = ("infra", "policy", "tools")
# Only the package is read: function/jobs/ (the shipped job modules, e.g. the downstream job's
# DOWNSTREAM_ID_TOKEN_DISABLED) is deployed beside it but not installed, so `make docs` and the
# policy pack cannot import its names yet.
# Deployed as source and run alone (`python3 -c` in a public Python image): it cannot import
# the package, so it reads the variables its execution is given by their names.
STANDALONE = {Path("infra/samples/cloud_run_job.py")}


def _contract() -> dict[str, str]:
    """Each spelling the package defines, with the definition it comes from."""
    spelt: dict[str, str] = {}
    for module_info in pkgutil.walk_packages(exactly_once.__path__, f"{exactly_once.__name__}."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if name.startswith("_"):
                continue
            if isinstance(value, str) and (name.endswith("_ENV") or name.startswith("DEFAULT_")):
                spelt.setdefault(value, f"{module.__name__}.{name}")
            elif isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                spelt.setdefault(value.pattern, f"{module.__name__}.{name}")
    return spelt


CONTRACT = _contract()


def respellings(folder: str) -> list[str]:
    found = []
    for path in python_sources(REPO_ROOT / folder):
        relative = path.relative_to(REPO_ROOT)
        if relative in STANDALONE:
            continue
        if relative.parts[:2] == ("policy", "tests"):  # the pack's tests: oracles, which spell values
            continue
        for line, text in string_constants(path.read_text(encoding="utf-8")):
            if text in CONTRACT:
                found.append(f"{relative}:{line}: {text!r} is {CONTRACT[text]}")
    return found


def test_the_contract_is_read_from_the_package() -> None:
    from exactly_once import config
    from exactly_once.endpoints import ENDPOINT_VARIABLES
    from exactly_once.token_check import settings

    for name in (config.LEASE_SECONDS_ENV, settings.COLLECTION_ENV, *ENDPOINT_VARIABLES):
        assert name in CONTRACT
    assert config.HANDLER_PATTERN.pattern in CONTRACT and config.DEFAULT_RUNS_COLLECTION in CONTRACT


def test_the_scan_finds_a_literal_in_code_but_not_in_prose() -> None:
    source = '''"""Reads LEASE_SECONDS."""
# LEASE_SECONDS in a comment
LEASE = "LEASE_SECONDS"
def f(x: str) -> str:
    """LEASE_SECONDS, in a docstring."""
    return f"{x}LEASE_SECONDS" + "the LEASE_SECONDS"
'''
    found = [(line, text) for line, text in string_constants(source) if text in CONTRACT]
    assert found == [(3, "LEASE_SECONDS"), (6, "LEASE_SECONDS")]


@pytest.mark.parametrize("folder", SCANNED)
def test_no_name_or_default_of_the_function_is_spelt_again(folder: str) -> None:
    assert respellings(folder) == []
