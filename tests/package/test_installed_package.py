"""`pip install ./function` gives any app `import exactly_once`: installed into a fresh
virtualenv, the example of docs/jobs.md ("Use it in your own service") deduplicates
deliveries on the emulator, it runs the installed copy, not this checkout's, and it carries the
license's text."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from localrun import FUNCTION_DIR
from localrun.function_server import FunctionServer
from tests.support.demo_runs import HEADERS

# Started first (tests/conftest.py): it builds and installs the package in a virtualenv of its own.
pytestmark = pytest.mark.slow_module

REPO_ROOT = Path(__file__).resolve().parents[2]
JOBS_DOC = REPO_ROOT / "docs" / "jobs.md"
EXAMPLE = "service_main.py"
INSTALL_TIMEOUT_SECONDS = 900


def example_source() -> str:
    text = JOBS_DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- example: {re.escape(EXAMPLE)} -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, f"docs/jobs.md has no example block for {EXAMPLE}"
    return found.group(1)


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with `pip install ./function` and nothing else (a copy of
    function/, since pip builds in the source tree), not even pip: the suite's pip installs into
    it (`--python`). That spares installing pip there and compiling every module installed (the
    tests import what they use), four seconds of CPU, and proves no less: the package and its
    dependencies are all that is installed either way."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "function"
    shutil.copytree(FUNCTION_DIR, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [*_pip(python), "install", "--quiet", "--no-compile", str(source)]
    subprocess.run(install, check=True, timeout=INSTALL_TIMEOUT_SECONDS)
    return python


def _pip(python: Path) -> list[str]:
    """pip, run on `python`'s environment."""
    return [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]


def test_the_package_installs_alone_and_owns_one_top_level_name(installed_python: Path) -> None:
    shown = subprocess.run(
        [*_pip(installed_python), "show", "--files", "exactly-once-scheduler-runs"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    files = [line.strip() for line in shown.split("Files:")[1].splitlines() if line.strip()]
    top_level = {name.split("/")[0] for name in files if not name.startswith("..")}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"exactly_once"}
    version = subprocess.run(
        [str(installed_python), "-c", "import exactly_once; print(exactly_once.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version) and f"Version: {version}" in shown


# Prints the installed distribution's License-File entries and each one's text, as JSON.
LICENSE_FILES = """\
import importlib.metadata, json, sys
dist = importlib.metadata.distribution(sys.argv[1])
names = dist.metadata.get_all("License-File") or []
print(json.dumps({name: dist.read_text(f"licenses/{name}") for name in names}))
"""


def test_the_installed_package_carries_the_license_text(installed_python: Path) -> None:
    """The Apache License 2.0 asks a redistribution to give its recipients a copy of the license
    (section 4(a)): the wheel, built from function/ alone as the fixture builds it, carries the
    repository's LICENSE in its metadata."""
    shown = subprocess.run(
        [str(installed_python), "-c", LICENSE_FILES, "exactly-once-scheduler-runs"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert json.loads(shown) == {"LICENSE": (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")}


def package_modules(root: Path) -> list[str]:
    """Every module of the exactly_once package under `root`, by its dotted name."""
    return sorted(
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for path in (root / "exactly_once").rglob("*.py")
    )


# Imports each module named on its command line; prints how many it imported.
IMPORT_EACH = """\
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(len(sys.argv) - 1)
"""


def test_every_module_imports_with_only_what_the_package_declares(
    installed_python: Path, tmp_path: Path
) -> None:
    """function/pyproject.toml's dependencies are all the package needs: each of its modules
    imports in a virtualenv holding nothing else, so a dependency missing from it fails here
    rather than in the first app that reaches that module."""
    modules = package_modules(FUNCTION_DIR)
    assert {"exactly_once", "exactly_once.audit.reads", "exactly_once.token_check.tokens"} <= set(modules)
    result = subprocess.run(
        [str(installed_python), "-c", IMPORT_EACH, *modules],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == str(len(modules))


def test_an_app_of_its_own_deduplicates_with_the_installed_package(
    installed_python: Path, emulator_host: str, project: str, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    source = app / "main.py"
    source.write_text(example_source())
    env = {"FIRESTORE_EMULATOR_HOST": emulator_host, "GOOGLE_CLOUD_PROJECT": project, "PYTHONPATH": ""}
    server = FunctionServer(
        env, tmp_path / "app.log", source=source, target="nightly_export", python=installed_python
    )
    server.start()
    try:
        first = requests.post(server.url, headers=HEADERS, timeout=60)
        again = requests.post(server.url, headers=HEADERS, timeout=60)
    finally:
        server.stop()
    assert (first.status_code, first.json()["outcome"]) == (200, "executed")
    assert first.json()["output"] == {"exported": first.json()["run_id"]}
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")
    assert again.json()["output"] == first.json()["output"]
    loaded_from = subprocess.run(
        [str(installed_python), "-c", "import exactly_once; print(exactly_once.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=app,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()
    assert loaded_from.startswith(str(installed_python.parent.parent)), loaded_from
