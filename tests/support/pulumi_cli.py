"""A stand-in for the Pulumi CLI on PATH: it answers `pulumi config --json --stack NAME` with
the JSON the CLI prints (an object keyed by full key, each entry `{"value", "objectValue",
"secret"}`, a secret's value left out unless `--show-secrets`), fails or hangs when told to,
and records every call. The code under test runs it as it would run the CLI, by name.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

_SCRIPT = """#!{python}
import json, os, sys, time
from pathlib import Path

here = Path(__file__).resolve().parent
plan = json.loads((here / "plan.json").read_text())
args = sys.argv[1:]
with (here / "calls.jsonl").open("a") as calls:
    calls.write(json.dumps({{"args": args, "cwd": os.getcwd()}}) + "\\n")
time.sleep(plan["sleep"])
if plan["stderr"] is not None:
    sys.stderr.write(plan["stderr"])
    sys.exit(plan["exit"])
stack = args[args.index("--stack") + 1]
if stack not in plan["stacks"]:
    sys.stderr.write("error: no stack named '" + stack + "' found\\n")
    sys.exit(255)
shown = "--show-secrets" in args
answer = {{
    key: entry if shown or not entry["secret"] else {{"secret": True}}
    for key, entry in plan["stacks"][stack].items()
}}
print(json.dumps(answer, indent=4))
"""


def cli_entry(value: Any, secret: bool = False) -> dict[str, Any]:
    """One config value as the CLI prints it: a list or a map as its JSON text and its value
    (`objectValue`), a scalar as a string (YAML's `false` as "false", `60` as "60")."""
    if isinstance(value, list | dict):
        return {"value": json.dumps(value), "objectValue": value, "secret": secret}
    return {"value": value if isinstance(value, str) else json.dumps(value), "secret": secret}


@dataclass
class StandInPulumi:
    folder: Path

    def __post_init__(self) -> None:
        self._plan: dict[str, Any] = {"stacks": {}, "sleep": 0, "stderr": None, "exit": 0}
        self._write()
        script = self.folder / "pulumi"
        script.write_text(_SCRIPT.format(python=sys.executable), encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def answer(self, stack: str, config: dict[str, Any], secrets: tuple[str, ...] = ()) -> None:
        """Answer for `stack` with `config` (full keys, values as YAML gives them, the keys in
        `secrets` secret), as the CLI would after resolving its files and environments."""
        self._plan["stacks"][stack] = {key: cli_entry(value, key in secrets) for key, value in config.items()}
        self._write()

    def fail(self, stderr: str, exit_status: int = 255) -> None:
        self._plan.update(stderr=stderr, exit=exit_status)
        self._write()

    def hang(self, seconds: float) -> None:
        self._plan["sleep"] = seconds
        self._write()

    def calls(self) -> list[list[str]]:
        """The arguments of every call so far."""
        return [record["args"] for record in self._records()]

    def working_folders(self) -> list[Path]:
        return [Path(record["cwd"]) for record in self._records()]

    def _records(self) -> list[dict[str, Any]]:
        log = self.folder / "calls.jsonl"
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        return [json.loads(line) for line in lines]

    def _write(self) -> None:
        (self.folder / "plan.json").write_text(json.dumps(self._plan), encoding="utf-8")


def put_pulumi_on_path(folder: Path, monkeypatch: pytest.MonkeyPatch) -> StandInPulumi:
    """A stand-in `pulumi` in `folder`, found first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("PATH", os.pathsep.join([str(folder), os.environ.get("PATH", "")]))
    return StandInPulumi(folder)


def take_pulumi_off_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH without any folder holding a `pulumi`: a machine without the CLI."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    monkeypatch.setenv("PATH", os.pathsep.join(f for f in folders if not (Path(f) / "pulumi").exists()))
