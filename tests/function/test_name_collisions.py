"""Cloud Run puts the function's source root on sys.path, so every top-level name there is
shared with the forker's modules and with every installed distribution. The function owns
one, `exactly_once` (besides `main` and `jobs`): modules of a forker's named like the ones a
library would call its own, and an installed distribution that ships top-level `config` and
`handler` modules, change nothing, for either entry point. The token check imports its code on
its first request, long after the forker's modules are on the path: it is served here too."""

from __future__ import annotations

import shutil

import requests

from localrun import FUNCTION_DIR
from tests.support.demo_runs import HEADERS, server_env

POISON = 'raise RuntimeError("the function imported {where} {name}.py: a name it must not own")\n'
# Names a library would give its modules, among them what the function's own were once called.
COMMON_NAMES = ("config", "handler", "ledger", "audit", "once", "idempotency", "tokens", "store", "settings")


def test_a_forkers_modules_and_an_installed_distribution_with_common_names_change_nothing(
    function_servers, emulator_host, project, tmp_path
):
    source = tmp_path / "function"
    shutil.copytree(FUNCTION_DIR, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in COMMON_NAMES:
        (source / f"{name}.py").write_text(POISON.format(where="a forker's", name=name))
    # What an installed distribution's top-level modules are to an importer: a sys.path entry.
    site = tmp_path / "site-packages"
    site.mkdir()
    for name in ("config", "handler"):
        (site / f"{name}.py").write_text(POISON.format(where="a distribution's", name=name))
    env = {**server_env(emulator_host, project), "PYTHONPATH": str(site)}

    server = function_servers(env, source=source / "main.py")
    first = requests.post(server.url, headers=HEADERS, timeout=60)
    again = requests.post(server.url, headers=HEADERS, timeout=60)
    assert (first.status_code, first.json()["outcome"]) == (200, "executed")
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate_completed")

    tokens = function_servers(env, source=source / "main.py", target="check_idempotency_token")
    begins = [requests.post(tokens.url, json={"token": "order-17", "fence": 1}, timeout=60) for _ in range(2)]
    assert [reply.status_code for reply in begins] == [200, 200], begins[0].text
    assert [reply.json()["first"] for reply in begins] == [True, False]
