"""`make docs`: write the reference tables of docs/ from the code they describe.

A table that is typed by hand drifts from the code the day someone adds a config key or an
outcome; this one is rendered from the definitions themselves, between marker comments in the
pages, and tests/docs/ fails when a page differs from what this would write. Everything
outside the markers is left alone, so running it twice changes nothing.

A table's markers stand on lines of their own; a figure's (a count, a list in a sentence or
a table cell) hold their value on the same line, `<!-- BEGIN GENERATED: alert-count -->8<!--
END GENERATED -->`, which Markdown shows as the bare value.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from pulumi_policy import StackValidationPolicy

from exactly_once.config import TIME_LIMIT_MARGIN_SECONDS
from exactly_once.delivery.outcomes import STATUS_AND_SEVERITY, Outcome
from exactly_once.ledger.lifecycle import TRANSITIONS, Event, State, Step
from exactly_once.ledger.lifecycle.job_lock import LOCK_TRANSITIONS
from exactly_once.ledger.lifecycle.job_state import JOB_TRANSITIONS
from infra.config.schema import CONFIG_KEYS, REPO_ROOT, ConfigKey
from infra.plan.outputs import STACK_OUTPUTS
from infra.settings.jobs import (
    _JOB_KEYS,
    CATCHUP_KEYS,
    DEFAULT_CATCHUP_RUNS,
    DEFAULT_OVERLAP,
    DEFAULT_RETRY,
    RETRY_KEYS,
)
from policy.scheduler_guardrails.policies import POLICIES
from policy.scheduler_guardrails.rules.config.access import GRANT_KINDS
from policy.scheduler_guardrails.rules.config.grants import STACK_GRANTS, grants_present
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KEYS, TARGET_KINDS
from policy.scheduler_guardrails.rules.timing.cron import DEFAULT_TIME_ZONE
from tools.doc_texts import FUNCTION_ENVIRONMENT, JOB_FIELD_MEANINGS, OUTCOME_MEANINGS
from tools.monitoring_docs import FIGURES as MONITORING_FIGURES
from tools.monitoring_docs import alerts_table, metrics_table
from tools.optional_parts import optional_parts_list

DOCS = REPO_ROOT / "docs"
_BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN GENERATED: (?P<name>[a-z-]+) -->(?P<newline>\n?))(?P<body>.*?)"
    r"(?P<end><!-- END GENERATED -->)",
    re.S,
)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = [f"| {' | '.join(header)} |", f"|{'|'.join(' --- ' for _ in header)}|"]
    lines += [f"| {' | '.join(_cell(cell) for cell in row)} |" for row in rows]
    return "\n".join(lines) + "\n"


def _default(key: ConfigKey) -> str:
    if key.default is None:
        return "derived (see meaning)"
    if isinstance(key.default, bool):
        return f"`{str(key.default).lower()}`"
    if isinstance(key.default, tuple):
        return f"`{list(key.default)}`"
    if isinstance(key.default, Mapping):
        return f"`{dict(key.default)}`"
    return f"`{key.default}`" if key.default != "" else '`""`'


def _job_defaults() -> dict[str, str]:
    # An attempt ends this long before its deadline, while its request still has CPU.
    margin = f"{TIME_LIMIT_MARGIN_SECONDS:g}"
    retry = {
        f"retry.{key}": f"`{getattr(DEFAULT_RETRY, attribute):g}`" for key, attribute in RETRY_KEYS.items()
    }
    return {
        "name": "— (required)",
        "runKey": "its `name`",
        "schedule": "— (required)",
        "timeZone": f"`{DEFAULT_TIME_ZONE}`",
        "attemptDeadlineSeconds": f"`timeLimitSeconds` + {margin}, else `functionTimeoutSeconds`",
        "timeLimitSeconds": f"`functionTimeoutSeconds` - {margin}",
        **retry,
        "handler": "`jobHandler`; required when the stack sets none",
        "overlap": f"`{DEFAULT_OVERLAP}`",
        "startingDeadlineSeconds": "none",
        "paused": "`false`",
        "catchup.runs": f"`{DEFAULT_CATCHUP_RUNS}`",
    }


def job_fields() -> list[str]:
    """Every field a `jobs` entry may set, as the parser spells them."""
    nested = ("retry", "catchup", *(kind.key for kind in TARGET_KINDS), "grants")
    fields = [key for key in _JOB_KEYS if key not in nested]
    fields += [f"retry.{key}" for key in RETRY_KEYS]
    fields += [f"catchup.{key}" for key in CATCHUP_KEYS]
    fields += [f"{kind.key}.{key}" for kind in TARGET_KINDS for key in kind.keys]
    fields += ["grants[].role", *(f"grants[].{kind.key}" for kind in GRANT_KINDS)]
    return fields


def job_fields_table() -> str:
    fields = job_fields()
    if set(fields) != set(JOB_FIELD_MEANINGS):
        raise SystemExit(
            "tools/doc_texts.py: JOB_FIELD_MEANINGS does not match the parser's fields: "
            f"{sorted(set(fields) ^ set(JOB_FIELD_MEANINGS))}"
        )
    defaults = _job_defaults()
    rows = [
        (
            f"`{field}`",
            JOB_FIELD_MEANINGS[field][0],
            defaults.get(field, "none"),
            JOB_FIELD_MEANINGS[field][1],
        )
        for field in fields
    ]
    return _table(("Field", "Type", "Default", "Meaning"), rows)


def config_keys_table() -> str:
    types = {"array": "list of strings", "object": "map of strings"}
    rows = [(f"`{k.name}`", types.get(k.type, k.type), _default(k), k.description) for k in CONFIG_KEYS]
    return _table(("Key", "Type", "Default", "Meaning"), rows)


def stack_outputs_table() -> str:
    rows = [
        (f"`{o.name}`", o.description + (f" Only with {o.only_with.shown}." if o.only_with else ""))
        for o in STACK_OUTPUTS
    ]
    return _table(("Output", "Meaning"), rows)


def policies_table() -> str:
    rows = [
        (
            f"`{p.name}`",
            "stack" if isinstance(p, StackValidationPolicy) else "resource",
            str(p.enforcement_level.value) if p.enforcement_level else "advisory",
            p.description,
        )
        for p in POLICIES
    ]
    return _table(("Policy", "Checks", "Level", "What it holds"), rows)


def outcomes_table() -> str:
    missing = [outcome.value for outcome in Outcome if outcome not in OUTCOME_MEANINGS]
    if missing:
        raise SystemExit(f"tools/doc_texts.py: describe the outcomes {missing} in OUTCOME_MEANINGS")
    rows = []
    for outcome in Outcome:
        status, severity = STATUS_AND_SEVERITY[outcome]
        rows.append((f"`{outcome.value}`", str(status), severity, OUTCOME_MEANINGS[outcome]))
    return _table(("Outcome", "HTTP", "Severity", "When"), rows)


def lifecycle_table() -> str:
    """The run's transitions, one row per event and step, its source states together, in the
    table's order (refusals last)."""
    grouped: dict[tuple[Event, Step], list[State]] = {}
    for (state, event), found in TRANSITIONS.items():
        grouped.setdefault((event, found), []).append(state)
    ordered = sorted(grouped.items(), key=lambda item: item[0][1].refusal is not None)
    rows = [
        (
            ", ".join(f"`{state.value}`" for state in states),
            event.value,
            found.shown,
            found.write.value,
            found.carries,
        )
        for (event, found), states in ordered
    ]
    return _table(("From", "Event", "To", "Write", "Rides along"), rows)


def job_lifecycle_table() -> str:
    rows = [
        (
            ", ".join(f"`{state.value}`" for state in row.sources),
            row.event.value,
            row.target,
            row.write,
            row.carries,
        )
        for row in JOB_TRANSITIONS
    ]
    return _table(("From", "Event", "To", "Write", "Rides along"), rows)


def job_lock_table() -> str:
    rows = [
        (
            f"`{state.value}`",
            event.value,
            row.target.value if row.target else "(unchanged)",
            row.write,
            row.carries,
        )
        for (state, event), row in LOCK_TRANSITIONS.items()
    ]
    return _table(("From", "Event", "To", "Write", "Rides along"), rows)


def least_privilege_table() -> str:
    """The stack's own accounts' grants (policy/scheduler_guardrails/rules/config/grants.py), of the target
    kinds present,
    one row per account, scope, condition and reason, its roles together."""
    rows: list[tuple[str, str, str, str, str]] = []
    for grant in grants_present(TARGET_KEYS, STACK_GRANTS):
        account = grant.account.shown
        when = " or ".join(condition.shown for condition in grant.when)
        previous = rows[-1] if rows else None
        if previous is not None and previous[2:] == (grant.scope.shown, when, grant.why):
            rows[-1] = (previous[0], f"{previous[1]}, `{grant.role}`", *previous[2:])
            continue
        shown = account if not any(row[0] == account for row in rows) else ""
        rows.append((shown, f"`{grant.role}`", grant.scope.shown, when, grant.why))
    return _table(("Account", "Role", "On", "When", "Why"), rows)


def function_environment_table() -> str:
    rows = [(f"`{v.name}`", v.default, v.meaning) for v in FUNCTION_ENVIRONMENT]
    return _table(("Variable", "Default", "Meaning"), rows)


TABLES: dict[str, Callable[[], str]] = {
    "config-keys": config_keys_table,
    "stack-outputs": stack_outputs_table,
    "policies": policies_table,
    "outcomes": outcomes_table,
    "lifecycle": lifecycle_table,
    "job-lifecycle": job_lifecycle_table,
    "job-lock": job_lock_table,
    "function-environment": function_environment_table,
    "least-privilege": least_privilege_table,
    "job-fields": job_fields_table,
    "metrics": lambda: metrics_table(_table),
    "alerts": lambda: alerts_table(_table),
}
FIGURES: dict[str, Callable[[], str]] = {**MONITORING_FIGURES, "optional-parts": optional_parts_list}


def render(text: str, source: str = "page") -> str:
    """`text` with every generated block rewritten; an unknown block name is an error, and so
    is a table inside a line or a figure on lines of its own."""

    def block(match: re.Match[str]) -> str:
        name, own_lines = match["name"], bool(match["newline"])
        if name in TABLES and own_lines:
            return f"{match['begin']}{TABLES[name]()}{match['end']}"
        if name in FIGURES and not own_lines:
            return f"{match['begin']}{FIGURES[name]()}{match['end']}"
        if name in TABLES or name in FIGURES:
            where = "on lines of its own" if name in TABLES else "inside one line"
            raise SystemExit(f"{source}: generated block {name!r} belongs {where}")
        known = ", ".join([*TABLES, *FIGURES])
        raise SystemExit(f"{source}: unknown generated block {name!r} (known: {known})")

    return _BLOCK.sub(block, text)


# The lifecycle package's own docstring carries its tables too: the module a reader opens first.
LIFECYCLE_MODULE = REPO_ROOT / "function" / "exactly_once" / "ledger" / "lifecycle" / "__init__.py"


def pages() -> list[Path]:
    return sorted([REPO_ROOT / "README.md", *DOCS.glob("*.md"), LIFECYCLE_MODULE])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        rendered = render(text, str(page.relative_to(REPO_ROOT)))
        if rendered != text:
            stale.append(page.relative_to(REPO_ROOT))
            if not args.check:
                page.write_text(rendered, encoding="utf-8")
    verb = "out of date" if args.check else "rewrote"
    for page_name in stale:
        print(f"{verb}: {page_name}", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
