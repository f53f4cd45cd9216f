"""The pack as `pulumi policy publish` uploads it: policy/ copied alone into an empty folder,
run with its own virtualenv (policy/venv, made from policy/requirements.txt and the function's
distribution), no PYTHONPATH and nothing of this repository reachable. It loads as the analyzer
loads it, judges a stack dump, and passes its own tests.

policy/tests/ runs here, in the copy, and nowhere else in `make test`: that is the run that
proves the pack's tests need only the pack.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.config.paths import REPO_ROOT

POLICY = REPO_ROOT / "policy"
PACK_PYTHON = POLICY / "venv" / "bin" / "python"
pytestmark = pytest.mark.skipif(not PACK_PYTHON.exists(), reason="policy/venv not made (make install)")

GOOD_STACK = {  # `pulumi stack export`: a private bucket
    "version": 3,
    "deployment": {
        "resources": [
            {"urn": "urn:pulumi:dev::fork::pulumi:pulumi:Stack::fork-dev", "type": "pulumi:pulumi:Stack"},
            {
                "urn": "urn:pulumi:dev::fork::gcp:storage/bucket:Bucket::sources",
                "type": "gcp:storage/bucket:Bucket",
                "inputs": {
                    "name": "sources",
                    "location": "US",
                    "publicAccessPrevention": "enforced",
                    "uniformBucketLevelAccess": True,
                },
            },
        ]
    },
}
OWNER_URN = "urn:pulumi:dev::fork::gcp:projects/iAMMember:IAMMember::owner"
BAD_STACK = {  # `pulumi preview --json`: a project-wide primitive role
    "steps": [
        {
            "op": "create",
            "urn": OWNER_URN,
            "newState": {
                "urn": OWNER_URN,
                "type": "gcp:projects/iAMMember:IAMMember",
                "inputs": {
                    "project": "p",
                    "role": "roles/owner",
                    "member": "serviceAccount:a@p.iam.gserviceaccount.com",
                },
            },
        }
    ]
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """policy/ without its virtualenv and caches, in a folder not named `policy`."""
    pack = tmp_path_factory.mktemp("published") / "guardrails"
    shutil.copytree(POLICY, pack, ignore=shutil.ignore_patterns("venv", "__pycache__", ".pytest_cache"))
    (pack.parent / "good.json").write_text(json.dumps(GOOD_STACK))
    (pack.parent / "bad.json").write_text(json.dumps(BAD_STACK))
    return pack


def _run(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PYTHONHOME"}}
    return subprocess.run(
        [str(PACK_PYTHON), *args], cwd=copy, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_entry_module_loads_the_pack_from_its_own_folder(copy: Path) -> None:
    # As `python -m pulumi.policy` runs it (runpy.run_path of the folder, as __main__), with
    # PolicyPack replaced so no gRPC server starts; then where each package came from.
    script = (
        "import runpy, sys, pulumi_policy\n"
        "seen = {}\n"
        "class Pack:\n"
        "    def __init__(self, name, policies, **_):\n"
        "        seen.update(name=name, count=len(policies))\n"
        "pulumi_policy.PolicyPack = Pack\n"
        "runpy.run_path('.', run_name='__main__')\n"
        "print(seen['name'], seen['count'])\n"
        "print(sys.modules['scheduler_guardrails'].__file__)\n"
        "print(sys.modules['exactly_once'].__file__)\n"
        "print(any(name == 'infra' or name.startswith('infra.') for name in sys.modules))\n"
    )
    result = _run(copy, "-c", script)
    assert result.returncode == 0, result.stderr
    loaded, package, function, infra = result.stdout.splitlines()
    assert loaded.split()[0] == "exactly-once-scheduler-guardrails" and int(loaded.split()[1]) > 0
    assert Path(package).is_relative_to(copy)
    assert Path(function).is_relative_to(POLICY / "venv")  # the installed distribution, not function/
    assert infra == "False"


def test_the_pack_judges_a_stack_dump(copy: Path) -> None:
    good = _run(copy, "-m", "scheduler_guardrails.dump", "../good.json")
    assert (good.returncode, good.stdout, good.stderr) == (0, "", "")
    bad = _run(copy, "-m", "scheduler_guardrails.dump", "../bad.json")
    assert bad.returncode == 1, bad.stderr
    assert "mandatory: no-primitive-roles owner: " in bad.stdout


def test_a_policy_config_file_sets_levels_and_a_malformed_one_is_refused(copy: Path) -> None:
    (copy.parent / "levels.json").write_text(
        json.dumps({"all": "advisory", "project-iam-allowlist": {"enforcementLevel": "disabled"}})
    )
    relaxed = _run(copy, "-m", "scheduler_guardrails.dump", "../bad.json", "--config", "../levels.json")
    assert relaxed.returncode == 0, relaxed.stderr
    lines = relaxed.stdout.splitlines()
    assert any(line.startswith("advisory: no-primitive-roles owner: ") for line in lines)
    assert all(line.startswith("advisory: ") for line in lines)
    assert "project-iam-allowlist" not in relaxed.stdout
    (copy.parent / "malformed.json").write_text(json.dumps({"project-role-holders": {"allowedRoles": []}}))
    refused = _run(copy, "-m", "scheduler_guardrails.dump", "../bad.json", "--config", "../malformed.json")
    assert refused.returncode == 2
    assert "project-role-holders" in refused.stderr and "allowedRoles" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_packs_own_tests_pass_in_the_copy(copy: Path) -> None:
    result = _run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1]
