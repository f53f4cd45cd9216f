"""The parts of the template a fork may delete with `git rm -r`, each with everything that goes
with it.

The template ships tools for its own development beside what a deployment needs: a benchmark,
a soak, a one-time CI bootstrap. A fork that will never run them should not have to keep them,
nor read their code to learn whether the rest still works without them. So each part here is
closed: nothing outside its paths imports it (tests/test_fork_prune.py reads every import in the
repository), the Makefile's targets and the linters take only what is there, and the docs'
references to a path of a part that is absent are not errors. After a deletion, `make check`,
`make test` and `make demo` stay green; the test deletes every part from a copy and runs them.

One list, rendered into the README's fork section by `make docs`; each part's `loses` says what
the fork gives up, for the reader of this list.

Whether a checkout still has a part is what git says of it, never what is on disk: `git rm -r`
deletes the files git tracks and leaves behind what git ignores, the compiled modules of a
checkout that has run (`infra/samples/__pycache__/`), which would otherwise keep a deleted part
present. The tests that read the source read the same listing, so build output
(`function/build/`, which `pip wheel ./function` leaves) is never taken for the source either.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from infra.config.paths import REPO_ROOT


@dataclass(frozen=True)
class OptionalPart:
    name: str
    # Every file and folder of the part, relative to the repository's root: its code and its tests.
    paths: tuple[str, ...]
    # What a fork gives up by deleting it.
    loses: str


OPTIONAL_PARTS: Final = (
    OptionalPart(
        "the benchmark",
        ("bench", "tests/bench"),
        "`make bench`: the measured cost of a run against a plain transactional flow",
    ),
    OptionalPart(
        "the soak",
        ("localrun/soak", "localrun/stacks/Pulumi.soak.yaml", "tests/localrun/soak"),
        "`make soak` and `make soak-short`: thousands of runs under every fault, counted independently",
    ),
    OptionalPart(
        "the CI bootstrap",
        ("bootstrap", "tests/bootstrap"),
        "the one-time Pulumi project that creates keyless GitHub deployer and previewer accounts "
        "(make them by hand as docs/ci.md describes, or deploy from elsewhere)",
    ),
    OptionalPart(
        "the proxy kinds",
        (
            "policy/scheduler_guardrails/rules/targets/workflow.py",
            "policy/scheduler_guardrails/rules/targets/cloud_run_job.py",
            "policy/scheduler_guardrails/rules/targets/bigquery.py",
            "infra/samples",
            "function/jobs/workflows.py",
            "function/jobs/cloud_run_job.py",
            "function/jobs/bigquery_job.py",
            "function/exactly_once/targets/cloud_run_job_spec.py",
            "function/exactly_once/targets/bigquery_job_spec.py",
            "tests/infra/samples",
            "tests/infra/targets/test_target_and_access_config.py",
            "tests/infra/targets/test_target_stack.py",
            "tests/infra/targets/test_workflow_settings.py",
            "tests/infra/targets/test_workflow_stack.py",
            "tests/infra/targets/test_kind_samples.py",
            "tests/function/targets",
            "tests/ops/test_downstream_following.py",
        ),
        "jobs that start a Workflows execution, a Cloud Run job execution or a BigQuery query job "
        "(`workflow:`, `cloudRunJob:`, `bigquery:`), and the samples' workflow, Cloud Run job, "
        "dataset and token check",
    ),
)


def part_of(relative: str) -> OptionalPart | None:
    """The part a repository path (relative, with `/`) belongs to, if any."""
    for part in OPTIONAL_PARTS:
        if any(relative == path or relative.startswith(f"{path}/") for path in part.paths):
            return part
    return None


def checkout_files(root: Path = REPO_ROOT, *paths: str) -> list[str]:
    """The checkout's files under `root` (relative to it, with `/`; only those under `paths` when
    given) as git sees them: tracked, or new and not ignored, and on disk. What a commit of the
    checkout would hold, so neither a module's bytecode nor a build's output."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths]
    listed = subprocess.run(listing, cwd=root, capture_output=True, check=False)
    if listed.returncode != 0:
        raise RuntimeError(
            f"{root} is not a git checkout ({listed.stderr.decode(errors='replace').strip()}): "
            "its files, and the optional parts it has, are what git tracks; run `git init` and commit it"
        )
    return sorted(name for name in listed.stdout.decode().split("\0") if name and (root / name).is_file())


def present_paths(part: OptionalPart, root: Path = REPO_ROOT) -> list[str]:
    """The paths of `part` that hold a file of the checkout (`checkout_files`), in the part's order."""
    files = checkout_files(root, *part.paths)
    return [path for path in part.paths if any(name == path or name.startswith(f"{path}/") for name in files)]


def pruned(relative: str, root: Path = REPO_ROOT) -> bool:
    """Whether `relative` lies in an optional part this checkout no longer has: a reference to it
    from the docs is the template's description, not a broken link."""
    part = part_of(relative)
    return part is not None and not checkout_files(root, *part.paths)


def optional_parts_list() -> str:
    """The README's sentence: each part and the paths that go with it."""
    described = (f"{part.name} ({', '.join(f'`{path}`' for path in part.paths)})" for part in OPTIONAL_PARTS)
    return ", ".join(described)
