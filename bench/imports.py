"""Cold start, dependency by dependency: what importing an entry module costs, and whose code
the time goes to. No Firestore is involved: this is what every new instance pays before it
can serve at all.

A fresh interpreter imports the module under `python -X importtime`; each imported module's
own ("self") time is added to the distribution that installed it (google-cloud-firestore,
grpcio, Flask, ...), to the standard library, or to this repository's own code. Self times
add up without counting a module twice, so the rows sum to the whole import. -X importtime
slows every import a little; the total import without it is the case's other row.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

STANDARD_LIBRARY = "Python standard library"
# This repository's own modules, as one owner: the package's lazy names and the job router
# import through importlib, which -X importtime does not log on its own line, so their time
# shows up in whichever first-party module imported them.
FIRST_PARTY = "first-party code (exactly_once, main.py, jobs/, bench/)"
_FIRST_PARTY_TOPS = ("exactly_once", "main", "jobs", "bench", "baseline_app")
_MARKER = "--- measured import starts ---"
_END = "--- measured import ends ---"
# Imported during the measured import but gone from sys.modules at its end: an optional
# dependency tried and not found (urllib3 tries brotli, for one), or one imported and dropped.
NOT_KEPT = "optional imports tried, not kept"
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)\s*$")

# Runs in the fresh interpreter, told the module, the marker and the labels in argv: mark
# where the measured import starts (startup imports such as site come before), import, then
# say who owns every module now loaded.
_CHILD = """
import json, sys
module, marker, end, stdlib_label, first_party = sys.argv[1:6]
first_party_tops = json.loads(sys.argv[6])
sys.stderr.write(marker + "\\n")
sys.stderr.flush()
__import__(module)  # the import statement's path: -X importtime logs the module itself too
sys.stderr.write(end + "\\n")
sys.stderr.flush()
import sysconfig
from importlib import metadata
from pathlib import Path

stdlib = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")}
files = {}
for dist in metadata.distributions():
    for file in dist.files or ():
        files[str(Path(dist.locate_file(file)).resolve())] = dist.metadata["Name"]
owners = {}
for name, mod in list(sys.modules.items()):
    top = name.split(".")[0]
    path = getattr(mod, "__file__", None)
    if top in first_party_tops:
        owners[name] = first_party
    elif path is None:
        owners[name] = stdlib_label
    else:
        resolved = Path(path).resolve()
        owner = files.get(str(resolved))
        in_stdlib = any(root in resolved.parents for root in stdlib) and "site-packages" not in resolved.parts
        owners[name] = owner or (stdlib_label if in_stdlib else "other: " + top)
print(json.dumps(owners))
"""


def import_profile(source: Path, env: Mapping[str, str]) -> dict[str, float]:
    """Milliseconds of importing `source`'s module, per owner (see the module docstring)."""
    completed = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            _CHILD,
            source.stem,
            _MARKER,
            _END,
            STANDARD_LIBRARY,
            FIRST_PARTY,
            json.dumps(_FIRST_PARTY_TOPS),
        ],
        cwd=source.parent,
        env={**os.environ, **env, "PYTHONPATH": str(source.parent)},
        capture_output=True,
        text=True,
        check=True,
    )
    owners: dict[str, str] = json.loads(completed.stdout.strip().splitlines()[-1])
    return by_owner(completed.stderr, owners)


def by_owner(importtime_output: str, owners: Mapping[str, str]) -> dict[str, float]:
    """Self times between the markers, summed per owner, in milliseconds."""
    totals: dict[str, float] = defaultdict(float)
    measuring = False
    for line in importtime_output.splitlines():
        if line.strip() in (_MARKER, _END):
            measuring = line.strip() == _MARKER
            continue
        match = _LINE.match(line)
        if measuring and match is not None:
            totals[owners.get(match.group(2), NOT_KEPT)] += int(match.group(1)) / 1000
    return dict(totals)
