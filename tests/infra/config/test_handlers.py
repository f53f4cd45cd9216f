"""A handler that the function could not run is refused before deploy, naming its config key;
and no stack the template ships falls back to a handler that does nothing."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime import config as runtime_config

from infra.config.schema import FUNCTION_DIR, REPO_ROOT, read_yaml
from infra.plan.audit_job import AUDIT_HANDLER
from infra.settings.loading import settings_from_config
from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.handlers import handler_problem, module_file
from policy.scheduler_guardrails.rules.config.problems import SettingsError
from policy.scheduler_guardrails.rules.config.python_source import last_binding, parse_python_file
from policy.scheduler_guardrails.rules.targets.registry import TARGET_KINDS
from tests.infra.conftest import DEMO_HANDLER, NAMESPACE, build, error_of, valid_job, valid_values
from tests.support.optional import needs_proxy_kinds, proxy_kind
from tests.support.stacks import FIXTURE_STACKS
from tools import mocked_program as pulumi_harness
from tools.mocked_program import run_main
from tools.optional_parts import pruned


@pytest.fixture
def function_dir(tmp_path: Path) -> Path:
    """A copy of function/ a test may add job modules to."""
    copy = tmp_path / "function"
    shutil.copytree(FUNCTION_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def problem_of(function_dir: Path, source: str, attribute: str = "run") -> str | None:
    (function_dir / "jobs" / "my_job.py").write_text(source)
    return handler_problem(f"jobs.my_job:{attribute}", function_dir)


def test_a_typo_in_the_module_names_the_key_and_the_files_looked_for() -> None:
    values = valid_values(
        jobHandler="jobs.my_jb:run", jobs=[valid_job(), valid_job(name="b", handler="jobs.demo:run_dem_job")]
    )
    with pytest.raises(SettingsError) as raised:
        build(values)
    message = str(raised.value)
    assert (
        f"{NAMESPACE}:jobHandler: 'jobs.my_jb:run': no module 'jobs.my_jb' in function/: neither "
        "function/jobs/my_jb.py nor function/jobs/my_jb/__init__.py exists"
    ) in message
    assert (
        f"{NAMESPACE}:jobs[1].handler: 'jobs.demo:run_dem_job': function/jobs/demo.py has no top-level "
        "'run_dem_job'; it defines demo_parameters, run_demo_job"
    ) in message


def test_a_handler_is_checked_against_the_function_dir_given(function_dir: Path) -> None:
    """A module of a name no fork uses: refused until the function dir holds it."""
    values = valid_values(jobs=[valid_job(handler="jobs.handler_under_test:run")])

    def load() -> StackSettings:
        return settings_from_config(
            values,
            project="p",
            region="eu-west1",
            stack="prod",
            namespace=NAMESPACE,
            function_dir=function_dir,
        )

    with pytest.raises(SettingsError, match=r"jobs\[0\]\.handler: 'jobs.handler_under_test:run': no module"):
        load()
    (function_dir / "jobs" / "handler_under_test.py").write_text("def run(context):\n    return None\n")
    assert load().jobs[0].handler == "jobs.handler_under_test:run"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from exactly_once import RunContext\n\ndef run(context: RunContext) -> None: ...\n", None),
        ("def run(context, dry_run=False):\n    pass\n", None),
        ("def run(*args):\n    pass\n", None),
        ("from typing import Any\n\ndef run(context: 'Any') -> None: ...\n", None),
        ("import functools\n\n@functools.cache\ndef run(a, b): ...\n", None),  # the decorator decides
        ("def make():\n    return print\n\nrun = make()\n", None),  # decided at start-up
        ("run = lambda context: None\n", None),
        ("try:\n    from jobs.fast import run\nexcept ImportError:\n    def run(context): ...\n", None),
        ("from jobs.demo import run_demo_job as run\n", None),
        ("from .noop import do_nothing as run\n", None),
        ("from json import loads as run\n", None),  # outside function/: decided at start-up
        ("def other(context): ...\n", "function/jobs/my_job.py has no top-level 'run'; it defines other"),
        ("run = 'jobs.demo:run_demo_job'\n", "'run' is bound to a constant, not a function"),
        ("import json as run\n", "'run' is a module, not a function"),
        ("class run:\n    pass\n", "'run' is a class; a handler is a function of one RunContext"),
        ("async def run(context): ...\n", "'run' is `async def`"),
        ("def run(): ...\n", "'run' takes no argument; a handler takes one RunContext"),
        ("def run(context, other): ...\n", "'run' takes 2 arguments; a handler takes one RunContext"),
        ("def run(context, *, region): ...\n", "'run' needs keyword arguments region"),
        ("import flask\n\ndef run(request: flask.Request): ...\n", "'run' takes a flask.Request; the router"),
        ("run = lambda: None\n", "'run' takes no argument"),
        ("from jobs.demo import nope as run\n", "function/jobs/demo.py has no top-level 'nope'"),
        ("def run(context)\n    pass\n", "function/jobs/my_job.py does not parse: expected ':' (line 1)"),
        (
            "from exactly_once import exactly_once\n\n@exactly_once\ndef run(run: 'RunContext'): ...\n",
            "'run' is decorated with @exactly_once, which serves it as an HTTP function of its own; the "
            "stack's entry point already runs every handler exactly once: remove the decorator",
        ),
        (
            "import functions_framework\n\n@functions_framework.http\ndef run(request): ...\n",
            "'run' is decorated with @functions_framework.http",
        ),
    ],
)
def test_what_the_router_could_not_call_is_refused(
    function_dir: Path, source: str, expected: str | None
) -> None:
    problem = problem_of(function_dir, source)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem


def test_a_package_module_and_a_cycle_of_re_exports_are_handled(function_dir: Path) -> None:
    package = function_dir / "jobs" / "reports"
    package.mkdir()
    (package / "__init__.py").write_text("from .daily import run\n")
    (package / "daily.py").write_text("from jobs.reports import run\n")  # a cycle: bounded, then accepted
    assert handler_problem("jobs.reports:run", function_dir) is None
    (package / "daily.py").write_text("def run(context, extra): ...\n")
    assert "takes 2 arguments" in str(handler_problem("jobs.reports:run", function_dir))


def shipped_handlers() -> list[str]:
    """The handlers docs/jobs.md lists under "Handlers that ship with the function"."""
    page = (FUNCTION_DIR.parent / "docs" / "jobs.md").read_text(encoding="utf-8")
    section = page.split("## Handlers that ship with the function", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(jobs\.\w+:\w+)` \|", section, re.MULTILINE)


def test_every_handler_the_function_ships_passes() -> None:
    """Every documented handler, the samples' and the proxies' among them, is one the function can run.
    Modules a fork adds to function/jobs/ are its own: they need no row in the template's table."""
    # The rows of a deleted optional part's handlers (the proxy kinds') describe the template.
    shipped = [
        spec
        for spec in shipped_handlers()
        if not pruned(f"function/{spec.partition(':')[0].replace('.', '/')}.py")
    ]
    named_by_the_stack = {DEMO_HANDLER, *(kind.handler for kind in TARGET_KINDS)}
    assert named_by_the_stack | {AUDIT_HANDLER} <= set(shipped)
    assert {spec: handler_problem(spec, FUNCTION_DIR) for spec in shipped} == dict.fromkeys(shipped)


def test_under_mocks_a_missing_handler_registers_no_resource(pulumi_config: dict[str, str]) -> None:
    pulumi_config[f"{NAMESPACE}:jobs"] = json.dumps([valid_job(handler="jobs.my_job:missing")])
    mocks = pulumi_harness.GcpMocks("p-123")
    with pytest.raises(pulumi.RunError, match=rf"{NAMESPACE}:jobs\[0\]\.handler: 'jobs.my_job:missing'"):
        run_main(pulumi_config, mocks)
    assert mocks.registered == []
    runtime_config.set_all_config({})


# A stack that names no jobHandler: the project declares none, so nothing runs by default.
NO_DEFAULT = f"{NAMESPACE}:jobs[1].handler: job 'nightly' names no handler and the stack sets no jobHandler"


def _without_default(**config: object) -> dict[str, Any]:
    values = valid_values(jobs=[valid_job(handler="jobs.noop:do_nothing"), valid_job(name="nightly")])
    del values["jobHandler"]
    return {**values, **config}


def test_a_job_without_handler_in_a_stack_without_jobhandler_is_refused_naming_both_ways_out() -> None:
    message = error_of(_without_default())
    assert (
        f"{NO_DEFAULT}: set its handler (jobs[1].handler: jobs.my_job:run), or the handler of every job "
        f"without one ({NAMESPACE}:jobHandler: jobs.my_job:run)"
    ) in message
    assert "jobs[0]" not in message


@pytest.mark.parametrize("way_out", ["job", "stack"])
def test_either_way_out_is_accepted(way_out: str) -> None:
    values = _without_default(**({"jobHandler": "jobs.noop:do_nothing"} if way_out == "stack" else {}))
    if way_out == "job":
        values["jobs"][1]["handler"] = "jobs.noop:do_nothing"
    settings = build(values)
    assert {settings.handler_of(job) for job in settings.jobs} == {"jobs.noop:do_nothing"}


@needs_proxy_kinds
def test_a_job_with_a_target_needs_no_handler_of_its_own() -> None:
    """Its kind's proxy runs it: the samples' workflow and BigQuery jobs name none."""
    values = _without_default(samples=True)
    values["jobs"].pop()
    handlers = {job.name: job.handler for job in build(values).jobs}
    assert handlers["workflow-proxy-demo"] == proxy_kind("workflow").handler


def test_under_mocks_a_job_without_handler_and_no_jobhandler_registers_no_resource(
    pulumi_config: dict[str, str],
) -> None:
    del pulumi_config[f"{NAMESPACE}:jobHandler"]
    pulumi_config[f"{NAMESPACE}:jobs"] = json.dumps(_without_default()["jobs"])
    mocks = pulumi_harness.GcpMocks("p-123")
    with pytest.raises(pulumi.RunError, match=re.escape(NO_DEFAULT)):
        run_main(pulumi_config, mocks)
    assert mocks.registered == []
    runtime_config.set_all_config({})


# --- no stack the template ships falls back to a job that does nothing -----------------------

# The template's own stacks: the fixtures the tests read, and the demo's and the soak's.
TEMPLATE_STACKS = sorted(
    [*FIXTURE_STACKS.glob("Pulumi.*.yaml"), *(REPO_ROOT / "localrun" / "stacks").glob("Pulumi.*.yaml")]
)
NOOP = "jobs.noop:do_nothing"


def _does_nothing(spec: str) -> bool:
    """True when the handler `spec` names is a function whose body does nothing: a docstring,
    `pass`, `...`, `del` of its argument, a bare `return`."""
    module, _, name = spec.partition(":")
    path = module_file(module, FUNCTION_DIR)
    assert path is not None, spec
    function = last_binding(parse_python_file(path).body, name)
    assert isinstance(function, ast.FunctionDef), spec
    return all(
        isinstance(statement, ast.Pass | ast.Delete)
        or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))
        or (isinstance(statement, ast.Return) and statement.value is None)
        for statement in function.body
    )


def test_the_no_op_job_is_told_from_one_that_does_something() -> None:
    assert _does_nothing(NOOP)
    assert not _does_nothing(DEMO_HANDLER)


@pytest.mark.parametrize("path", TEMPLATE_STACKS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_no_stack_the_template_ships_falls_back_to_a_handler_that_does_nothing(path: Path) -> None:
    """A job copied from such a stack without its own handler would run, succeed and do nothing,
    and nothing would say so: a stack that wants a no-op names it per job."""
    fallback = read_yaml(path)["config"].get(f"{NAMESPACE}:jobHandler")
    assert fallback is None or not _does_nothing(fallback)
