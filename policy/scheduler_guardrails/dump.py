"""Judge a stack's resources, as a file, by the pack: the published pack's own check that it
loads and judges, with no Pulumi CLI, no engine and no stack of this repository.

    python -m scheduler_guardrails.dump STACK.json [--config POLICY-CONFIG.json]

(from the pack's directory; `python -m policy.scheduler_guardrails.dump` from the repository's
root). STACK.json is what `pulumi stack export` writes (`deployment.resources`) or what
`pulumi preview --json` prints (each step's `newState`); POLICY-CONFIG.json is a policy config
file as `pulumi policy validate-config` takes it. Each resource goes through offline.py, the
way the engine hands it to a policy; a resource's inputs are what resource policies see, its
outputs (its inputs, in a preview) what stack policies see. One line per violation; the exit
status is 1 when one is mandatory, 2 when a file is unreadable or the config is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .offline import pack_violations

Resource = tuple[str, str, Mapping[str, Any], Mapping[str, Any]]


class DumpError(ValueError):
    """A file that is not a stack dump or a policy config; the message says which part."""


def _json_file(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise DumpError(f"{path}: cannot read the {what}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise DumpError(f"{path}: the {what} is not JSON ({error.msg}, line {error.lineno})") from None


def _states(dump: Any, path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each resource's state, named by where it is in the file."""
    if isinstance(dump, Mapping) and isinstance(dump.get("deployment"), Mapping):
        states = dump["deployment"].get("resources") or []
        where = "deployment.resources"
        yield from ((f"{where}[{index}]", state) for index, state in enumerate(states))
    elif isinstance(dump, Mapping) and isinstance(dump.get("steps"), list):
        for index, step in enumerate(dump["steps"]):
            state = step.get("newState") if isinstance(step, Mapping) else None
            if state is not None:  # a deletion leaves no new state to judge
                yield f"steps[{index}].newState", state
    else:
        raise DumpError(
            f"{path}: neither `pulumi stack export` output (deployment.resources) nor "
            "`pulumi preview --json` output (steps)"
        )


def stack_resources(dump: Any, path: Path) -> list[Resource]:
    """(type, name, inputs, outputs) of every resource in `dump`, as pack_violations takes them."""
    resources: list[Resource] = []
    for where, state in _states(dump, path):
        if not isinstance(state, Mapping) or not isinstance(state.get("urn"), str):
            raise DumpError(f"{path}: {where} has no urn")
        typ, urn = state.get("type"), state["urn"]
        if not isinstance(typ, str):
            raise DumpError(f"{path}: {where} ({urn}) has no type")
        inputs = state.get("inputs") or {}
        outputs = state.get("outputs") or inputs
        if not isinstance(inputs, Mapping) or not isinstance(outputs, Mapping):
            raise DumpError(f"{path}: {where} ({urn}): inputs and outputs must be objects")
        resources.append((typ, urn.rsplit("::", 1)[-1], inputs, outputs))
    return resources


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scheduler_guardrails.dump", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", type=Path, help="pulumi stack export or pulumi preview --json output")
    parser.add_argument("--config", type=Path, help="a policy config file (pulumi policy validate-config)")
    args = parser.parse_args(argv)
    try:
        resources = stack_resources(_json_file(args.stack, "stack dump"), args.stack)
        config = _json_file(args.config, "policy config") if args.config is not None else None
        if config is not None and not isinstance(config, Mapping):
            raise DumpError(f"{args.config}: a policy config is an object of policy names")
        found = pack_violations(resources, config)
    except (DumpError, ValueError) as error:
        print(f"scheduler_guardrails.dump: {error}", file=sys.stderr)
        return 2
    for violation in found:
        print(f"{'advisory' if violation.advisory else 'mandatory'}: {violation}")
    return 1 if any(not violation.advisory for violation in found) else 0


if __name__ == "__main__":
    sys.exit(main())
