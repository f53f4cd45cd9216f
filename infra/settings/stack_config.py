"""A stack's config values as `pulumi up` resolves them, for the tools that run without the engine.

`pulumi up` does not read `Pulumi.<stack>.yaml` alone: it applies the project's defaults from
Pulumi.yaml, merges in the values of every Pulumi ESC environment the stack imports
(`environment:`), and decrypts its `secure:` values. Only the Pulumi CLI can do the last two.
So where the CLI is on PATH, a stack of the project is read through it (`pulumi config --json`,
its resolved config); without it, or when it cannot answer (not logged in, no such stack in the
backend, no answer in time), from the files. What the files cannot say (an environment's values,
a secret's plaintext) is then an error naming what could not be read and how to let it be read:
never "is not set", which would send the user to set a value `pulumi up` already has.

A secret is decrypted only when the settings read its key: the CLI is asked once more, with
`--show-secrets`, for a stack whose project keys, `gcp:project` or `gcp:region` came back
secret. Secrets of other namespaces (a provider's credentials, an environment's access token)
are never decrypted; a secret key of the project that the settings do not know stands as the
CLI's "[secret]", so it is still reported as an unknown key, unread.

The template's own stacks (the demo's, the tests' fixtures) are not stacks of a Pulumi project
in any backend: they are always read from their files.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.config.schema import JOBS_KEY, KEYS_BY_NAME, PROJECT_FILE, project_name, read_yaml
from policy.scheduler_guardrails.rules.config.problems import SettingsError

PULUMI_CLI = "pulumi"
# Long enough for a backend in a bucket and for opening an environment that logs in to a cloud;
# short enough that a CLI waiting on something (a prompt, a lock) does not hold a tool forever.
CLI_TIMEOUT_SECONDS = 60.0
GCP_PROJECT_KEY = "gcp:project"
GCP_REGION_KEY = "gcp:region"
# What the CLI prints in place of a secret it does not decrypt.
SECRET_SHOWN_AS = "[secret]"
SECURE_TAG = "secure"


@dataclass(frozen=True)
class StackConfig:
    """One stack's config as the settings take it: the project's own keys without their
    namespace (Pulumi.yaml's defaults applied), and the Google Cloud project and region."""

    namespace: str
    values: dict[str, Any]
    project: str
    region: str


class CliUnanswered(Exception):
    """The CLI gave no usable answer: `command` as a user would type it, and why."""

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(f"`{command}` {reason}")


def read_stack_config(
    stack: str, root: Path, stacks_dir: Path | None = None, *, timeout_seconds: float = CLI_TIMEOUT_SECONDS
) -> StackConfig:
    """The config of `stack`, whose `Pulumi.<stack>.yaml` is in `stacks_dir` (by default the
    project's folder `root`): through the Pulumi CLI where it is on PATH and the stack is one of
    the project's, else from the files. SettingsError, in one line, for what neither can read."""
    namespace = project_name(root)
    folder = stacks_dir or root
    unanswered = None
    executable = shutil.which(PULUMI_CLI)
    if executable is not None and folder.resolve() == root.resolve():
        try:
            return _from_cli(executable, stack, root, namespace, timeout_seconds)
        except CliUnanswered as error:
            unanswered = error
    return _from_files(stack, root, folder, namespace, unanswered)


def _needed_keys(namespace: str) -> set[str]:
    """The full keys the settings read a value of."""
    return {f"{namespace}:{name}" for name in (*KEYS_BY_NAME, JOBS_KEY)} | {GCP_PROJECT_KEY, GCP_REGION_KEY}


def _from_cli(executable: str, stack: str, root: Path, namespace: str, timeout_seconds: float) -> StackConfig:
    _, answer = _ask(executable, stack, root, timeout_seconds, show_secrets=False)
    needed = _needed_keys(namespace)
    if any(_hidden(answer.get(key)) for key in needed):
        command, answer = _ask(executable, stack, root, timeout_seconds, show_secrets=True)
        if hidden := sorted(key for key in needed if _hidden(answer.get(key))):
            raise CliUnanswered(command, f"showed no value for the secret {', '.join(hidden)}")
    values = {
        key.removeprefix(f"{namespace}:"): _typed(key.removeprefix(f"{namespace}:"), entry)
        for key, entry in answer.items()
        if key.startswith(f"{namespace}:")
    }
    return StackConfig(
        namespace,
        values,
        project=str(_typed(GCP_PROJECT_KEY, answer.get(GCP_PROJECT_KEY, {})) or ""),
        region=str(_typed(GCP_REGION_KEY, answer.get(GCP_REGION_KEY, {})) or ""),
    )


def _ask(
    executable: str, stack: str, root: Path, timeout_seconds: float, *, show_secrets: bool
) -> tuple[str, Mapping[str, Mapping[str, Any]]]:
    """The command as a user would type it, and its answer: `pulumi config --json` of `stack`,
    run in the project's folder, is an object keyed by full key, each entry `{"value": <string>,
    "objectValue": <a list's or a map's value>, "secret": <bool>}`, a secret's value left out
    unless `show_secrets`.

    `--open` resolves the imported environments as `pulumi up` does (without `--show-secrets`
    the CLI otherwise only checks them); `--non-interactive` turns a prompt (no stack, no
    login) into an error. The update check is skipped: it is a request to the Internet that
    answers nothing asked here."""
    arguments = ["config", "--json", "--open", "--stack", stack, "--non-interactive"]
    if show_secrets:
        arguments.append("--show-secrets")
    command = shlex.join([PULUMI_CLI, *arguments])
    try:
        result = subprocess.run(
            [executable, *arguments],
            cwd=root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_seconds,
            env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CliUnanswered(command, f"gave no answer within {timeout_seconds:g} s") from None
    except OSError as error:
        raise CliUnanswered(command, f"could not be started ({error})") from None
    if result.returncode != 0:
        said = _error_line(result.stderr) or _error_line(result.stdout) or "nothing on stderr"
        raise CliUnanswered(command, f"failed with exit status {result.returncode}: {said}")
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        raise CliUnanswered(command, f"printed no JSON: {_first_line(result.stdout)!r}") from None
    if not isinstance(answer, dict) or not all(isinstance(entry, dict) for entry in answer.values()):
        raise CliUnanswered(command, "printed JSON that is not an object of config entries")
    return command, answer


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _error_line(text: str) -> str:
    """What the CLI said went wrong: its first `error:` line (a warning may come before it),
    else its first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("error:")), _first_line(text))


def _hidden(entry: Mapping[str, Any] | None) -> bool:
    """A secret whose value the CLI did not show (it leaves the value out, or, in older
    versions, prints "[secret]")."""
    return (
        entry is not None
        and entry.get("secret") is True
        and "objectValue" not in entry
        and entry.get("value", SECRET_SHOWN_AS) == SECRET_SHOWN_AS
    )


def _typed(name: str, entry: Mapping[str, Any]) -> Any:
    """An entry of the CLI's answer as the YAML files give it. A list or a map comes as its
    value (`objectValue`); a scalar comes as a string, read by the key's declared type the way
    the program's `pulumi.Config` reads it (get_int, get_bool, get_object), so `make check` and
    `pulumi up` judge the same values. A string of the wrong type stays a string: the settings
    report it, naming the key. A secret left hidden (a key the settings do not read) stays
    "[secret]"."""
    if _hidden(entry):
        return SECRET_SHOWN_AS
    if "objectValue" in entry:
        return entry["objectValue"]
    value = entry.get("value")
    if not isinstance(value, str):
        return value
    declared = KEYS_BY_NAME.get(name)
    kind = declared.type if declared is not None else None
    try:
        if kind == "integer":
            return int(value)
        if kind in ("array", "object") or name == JOBS_KEY:
            return json.loads(value)
    except ValueError:
        return value
    if kind == "boolean" and value in ("true", "True", "false", "False"):
        return value.lower() == "true"
    return value


def _from_files(
    stack: str, root: Path, folder: Path, namespace: str, unanswered: CliUnanswered | None
) -> StackConfig:
    """The config from Pulumi.yaml's defaults and the stack's file; SettingsError when the file
    imports an environment or holds a secret the settings read, which only the CLI can read."""
    path = folder / f"Pulumi.{stack}.yaml"
    stack_file = read_yaml(path)
    values: dict[str, Any] = {}
    for key, schema in (read_yaml(root / PROJECT_FILE).get("config") or {}).items():
        name = key.removeprefix(f"{namespace}:")
        if isinstance(schema, Mapping) and "default" in schema:
            values[name] = schema["default"]
        elif isinstance(schema, Mapping) and "value" in schema:
            values[name] = schema["value"]
    stack_config: Mapping[str, Any] = stack_file.get("config") or {}
    needed = _needed_keys(namespace)
    secrets = [found for key in needed & set(stack_config) for found in _secure_paths(stack_config[key], key)]
    for key, value in stack_config.items():
        if key.startswith(f"{namespace}:"):
            values[key.removeprefix(f"{namespace}:")] = SECRET_SHOWN_AS if _is_secure(value) else value
    environments = _imported_environments(stack_file.get("environment"))
    if environments or secrets:
        raise SettingsError(_unreadable(stack, path, environments, sorted(secrets), unanswered))
    return StackConfig(
        namespace,
        values,
        project=str(stack_config.get(GCP_PROJECT_KEY) or ""),
        region=str(stack_config.get(GCP_REGION_KEY) or ""),
    )


def _is_secure(value: Any) -> bool:
    """A `secure:` value as Pulumi writes it: a map of one key, the ciphertext."""
    return isinstance(value, Mapping) and list(value) == [SECURE_TAG] and isinstance(value[SECURE_TAG], str)


def _secure_paths(value: Any, key: str) -> list[str]:
    """Where in `value` (the value of `key`) a secret is, as `pulumi config set --path` names it."""
    if _is_secure(value):
        return [key]
    if isinstance(value, Mapping):
        return [path for name, item in value.items() for path in _secure_paths(item, f"{key}.{name}")]
    if isinstance(value, list):
        return [path for index, item in enumerate(value) for path in _secure_paths(item, f"{key}[{index}]")]
    return []


def _imported_environments(raw: Any) -> list[str]:
    """The Pulumi ESC environments a stack file's `environment:` imports: a list of names, or an
    environment definition with `imports:` (an import may carry options: `- name: {merge: false}`)
    and possibly values of its own, which count as an environment too."""
    if not raw:
        return []
    definition = raw if isinstance(raw, Mapping) else {"imports": raw if isinstance(raw, list) else [raw]}
    names = [
        str(name)
        for item in definition.get("imports") or []
        for name in (item if isinstance(item, Mapping) else [item])
    ]
    if any(key != "imports" for key in definition):
        names.append("the one defined in the stack file (environment: values)")
    return names


def _unreadable(
    stack: str, path: Path, environments: list[str], secrets: list[str], unanswered: CliUnanswered | None
) -> str:
    """One line: what of the stack's config only the CLI can read, and what to do about it."""
    what = []
    if environments:
        plural = "s" if len(environments) > 1 else ""
        what.append(
            f"imports the Pulumi ESC environment{plural} {', '.join(environments)}, whose values "
            "(gcp:project, gcp:region or any other key) only the Pulumi CLI can read"
        )
    if secrets:
        what.append(f"holds {', '.join(secrets)} as a secret (secure:), which only the Pulumi CLI decrypts")
    if unanswered is None:
        fix = "install the Pulumi CLI and log in (`pulumi login`), then run this again"
    else:
        fix = f"{unanswered}: fix that, then run this again"
    if secrets and not environments:
        fix += f", or set {'it' if len(secrets) == 1 else 'them'} in plain text in {path.name}"
    return f"stack {stack!r} ({path.name}) {' and '.join(what)}; {fix}"
