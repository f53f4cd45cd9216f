"""Is a configured handler (`jobs.my_job:run`) something the function can run? Checked before deploy.

The deployed function resolves every handler when an instance starts, so a typo would only show
as instances that never start. This module answers the same question from the source in
`function/`, before any resource is declared: the module exists, it defines the attribute,
and the attribute is a function the router can call with one RunContext.

It reads the module's syntax tree and imports nothing. Importing a job module in the Pulumi
program's process would run its top-level code there, and pull its dependencies: the ones a
job declares in function/requirements.txt are installed in the deployed function, not in the
program's virtualenv, and a client built at import would need credentials in a preview.
Parsing needs neither, runs under Pulumi's mocks and in the policy-free local tools alike, and
costs a few milliseconds per module. What a syntax tree cannot decide (a handler bound at
import time, `run = make_job(...)`) is accepted here and decided when the instance starts.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from exactly_once.config import HANDLER_PATTERN

from .problems import ConfigProblems
from .python_source import last_binding, parse_python

# The router calls a handler with one positional argument; these annotations admit it.
_CONTEXT_ANNOTATIONS = frozenset({"RunContext", "Any", "object"})
# Decorators that turn a job into an HTTP function of its own: the router would hand it a
# RunContext where it expects a request.
_SERVING_DECORATORS = {
    "exactly_once": "@exactly_once, which serves it as an HTTP function of its own",
    "http": "@functions_framework.http, which makes it an HTTP function of its own",
}
_NOT_CALLABLE = (ast.Constant, ast.JoinedStr, ast.List, ast.Dict, ast.Set, ast.Tuple, ast.ListComp)
# Re-exports followed from one module of function/ to another, at most this deep.
_MAX_HOPS = 8


# What a handler looks like, shown when a spelling cannot be turned into one.
HANDLER_EXAMPLE = "jobs.my_job:run"


def check_handlers(
    job_handler: str, raw_jobs: Any, unhandled: Collection[str], function_dir: Path, errors: ConfigProblems
) -> None:
    """`jobHandler` and every job's own `handler`, each refused under its own key; and every job
    in `unhandled` (the names of the jobs that set no handler and have no target to imply one)
    when the stack sets no `jobHandler`: no job runs logic its stack never named."""
    if not job_handler and isinstance(raw_jobs, list):
        errors.extend(
            f"{errors.key(f'jobs[{index}].handler')}: job {item['name']!r} names no handler and the stack "
            f"sets no jobHandler: set its handler (jobs[{index}].handler: {HANDLER_EXAMPLE}), or the "
            f"handler of every job without one ({errors.key('jobHandler')}: {HANDLER_EXAMPLE})"
            for index, item in enumerate(raw_jobs)
            if isinstance(item, Mapping) and item.get("name") in unhandled
        )
    specs = [("jobHandler", job_handler)] if job_handler else []
    if isinstance(raw_jobs, list):
        specs += [
            (f"jobs[{index}].handler", item["handler"])
            for index, item in enumerate(raw_jobs)
            if isinstance(item, Mapping) and isinstance(item.get("handler"), str)
        ]
    for key, spec in specs:
        if HANDLER_PATTERN.match(spec) and (problem := handler_problem(spec, function_dir)) is not None:
            errors.append(f"{errors.key(key)}: {spec!r}: {problem}")


def malformed_handler(spec: object) -> str:
    """Why `spec` is not module:callable, with the spelling it most likely meant: a file path
    (`jobs/x.py:run`) is the usual slip, and the import path is `jobs.x:run`."""
    example = HANDLER_EXAMPLE
    if isinstance(spec, str) and ":" in spec:
        path, _, attribute = spec.partition(":")
        module = path.strip().replace("\\", "/").removeprefix("function/").removesuffix(".py")
        if HANDLER_PATTERN.match(meant := f"{module.replace('/', '.')}:{attribute.strip()}"):
            example = meant
    return (
        f"{spec!r} is not module:callable: the module's dotted import path inside function/, a colon, "
        f"then the function's name, e.g. {example!r}"
    )


def handler_problem(spec: str, function_dir: Path) -> str | None:
    """Why `spec` (module:callable, already well-formed) cannot be a handler of the function
    deployed from `function_dir`; None when it can."""
    module, _, attribute = spec.partition(":")
    return _problem(module, attribute, function_dir, hops=0)


def _problem(module: str, attribute: str, function_dir: Path, hops: int) -> str | None:
    path = module_file(module, function_dir)
    if path is None:
        relative = module.replace(".", "/")
        return (
            f"no module {module!r} in function/: neither function/{relative}.py nor "
            f"function/{relative}/__init__.py exists (handlers are modules inside function/)"
        )
    shown = f"function/{path.relative_to(function_dir).as_posix()}"
    try:
        tree = parse_python(path.read_text(encoding="utf-8"), filename=shown)
    except SyntaxError as error:
        return f"{shown} does not parse: {error.msg} (line {error.lineno})"
    binding = last_binding(tree.body, attribute)
    if binding is None:
        defined = sorted(_defined_functions(tree.body))
        found = f"; it defines {', '.join(defined)}" if defined else ""
        return f"{shown} has no top-level {attribute!r}{found}"
    if isinstance(binding, ast.FunctionDef):
        return _function_problem(binding, shown)
    if isinstance(binding, ast.AsyncFunctionDef):
        return f"{shown}: {attribute!r} is `async def`; the router calls a handler and uses what it returns"
    if isinstance(binding, ast.ClassDef):
        return f"{shown}: {attribute!r} is a class; a handler is a function of one RunContext"
    if isinstance(binding, ast.ImportFrom):
        source = _imported_module(binding, module, path)
        name = next(alias.name for alias in binding.names if (alias.asname or alias.name) == attribute)
        if source is not None and hops < _MAX_HOPS and module_file(source, function_dir) is not None:
            return _problem(source, name, function_dir, hops + 1)
        return None  # from outside function/: resolved when the instance starts
    if isinstance(binding, ast.Import):
        return f"{shown}: {attribute!r} is a module, not a function"
    if isinstance(binding, ast.Lambda):
        return _arguments_problem(binding.args, f"{shown}: {attribute!r}")
    if isinstance(binding, _NOT_CALLABLE):
        return f"{shown}: {attribute!r} is bound to a {type(binding).__name__.lower()}, not a function"
    return None  # bound by an expression: decided when the instance starts


def module_file(module: str, function_dir: Path) -> Path | None:
    """The source file of `module` inside function_dir, as the function's import would find it."""
    base = function_dir.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined_functions(body: list[ast.stmt]) -> set[str]:
    return {s.name for s in body if isinstance(s, ast.FunctionDef) and not s.name.startswith("_")}


def _imported_module(statement: ast.ImportFrom, module: str, path: Path) -> str | None:
    """The absolute name of the module a `from ... import` reads from."""
    if statement.level == 0:
        return statement.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if statement.level - 1 > len(package):
        return None
    base = package[: len(package) - (statement.level - 1)]
    return ".".join([*base, *([statement.module] if statement.module else [])]) or None


def _function_problem(function: ast.FunctionDef, shown: str) -> str | None:
    about = f"{shown}: {function.name!r}"
    others = []
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in _SERVING_DECORATORS:
            return (
                f"{about} is decorated with {_SERVING_DECORATORS[name]}; the stack's entry point "
                "already runs every handler exactly once: remove the decorator"
            )
        others.append(name)
    if others:
        return None  # another decorator decides what is called
    return _arguments_problem(function.args, about)


def _arguments_problem(arguments: ast.arguments, about: str) -> str | None:
    positional = [*arguments.posonlyargs, *arguments.args]
    required = len(positional) - len(arguments.defaults)
    if not positional and arguments.vararg is None:
        return f"{about} takes no argument; a handler takes one RunContext"
    if required > 1:
        return f"{about} takes {required} arguments; a handler takes one RunContext"
    if missing := [
        a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is None
    ]:
        return f"{about} needs keyword arguments {', '.join(missing)}; a handler takes one RunContext"
    first = positional[0] if positional else arguments.vararg
    annotation = first.annotation if first is not None else None
    if annotation is not None:
        text = str(annotation.value) if isinstance(annotation, ast.Constant) else ast.unparse(annotation)
        if text.rsplit(".", 1)[-1] not in _CONTEXT_ANNOTATIONS:
            return f"{about} takes a {text}; the router passes a RunContext"
    return None
