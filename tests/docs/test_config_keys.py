"""The config reference is Pulumi.yaml's `config:` section: CONFIG_KEYS is read from it, and
the defaults that cross into the function agree with the function's own defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exactly_once.config import FunctionConfig
from exactly_once.token_check.settings import TokenStoreConfig
from infra.config.schema import CONFIG_KEYS, KEYS_BY_NAME, REPO_ROOT, declared_config_keys
from policy.scheduler_guardrails.rules.config.problems import SettingsError


def test_no_job_logic_runs_unless_the_stack_names_it() -> None:
    """No jobHandler by default: a job that names no handler of its own is refused unless its
    stack sets one (tests/infra/config/test_handlers.py), so nothing runs the demo job unasked."""
    assert KEYS_BY_NAME["jobHandler"].default == ""


def test_config_keys_are_the_declared_section_plus_the_derived_default() -> None:
    declared = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))["config"]
    assert [key.name for key in CONFIG_KEYS] == [*declared, "createDatabase"]
    assert KEYS_BY_NAME["alertNotificationChannels"].default == ()
    assert KEYS_BY_NAME["createDatabase"].default is None


def test_the_function_defaults_match_the_project_defaults() -> None:
    function, tokens = FunctionConfig(), TokenStoreConfig()
    assert KEYS_BY_NAME["runsCollection"].default == function.runs_collection
    # The function has no handler of its own: a job without one is refused, naming it.
    assert function.job_handler is None
    assert KEYS_BY_NAME["idempotencyCollection"].default == tokens.collection
    assert KEYS_BY_NAME["idempotencyRetentionSeconds"].default == tokens.retention_seconds


@pytest.mark.parametrize(
    "schema",
    [{"type": "integer", "description": "no default"}, {"type": "map", "default": 1, "description": "d"}],
)
def test_a_key_declared_without_type_default_or_description_is_refused(
    tmp_path: Path, schema: dict[str, object]
) -> None:
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "p", "config": {"someKey": schema}}))
    with pytest.raises(SettingsError, match="config key 'someKey' needs a type, default and description"):
        declared_config_keys(tmp_path)
