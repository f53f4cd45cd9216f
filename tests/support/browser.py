"""A page rendered by headless Chromium (Debian's package), and its layout read back.

Chromium's `--dump-dom` prints the document after its scripts ran, so the layout is read by
rendering a copy of the page with one script added at its end, which writes the boxes of the
elements a test asks about into the document as JSON; the page itself carries no script.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

# What `make install` runs as root to install it (Makefile's `browser` target).
CHROMIUM_INSTALL = "apt-get install -y chromium"
MISSING = (
    f"headless Chromium is not installed, so the page's rendering test is skipped; install it "
    f"with: sudo {CHROMIUM_INSTALL} (Debian/Ubuntu), or run `make install` as root"
)
# A first start on a busy machine builds Chromium's profile: generous, and only a ceiling.
RENDER_TIMEOUT_SECONDS = 120

_MEASURE = """
<script>
const box = (element) => {
  const r = element.getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom];
};
const measured = [...document.querySelectorAll('section.job')].map((row) => ({
  job: row.dataset.job,
  label: box(row.querySelector('.label')),
  runs: [...row.querySelectorAll('.run')].map((cell) => ({
    id: cell.dataset.runId, outcome: cell.dataset.outcome, box: box(cell),
  })),
}));
const out = document.createElement('pre');
out.id = 'measured';
out.textContent = JSON.stringify(measured);
document.body.appendChild(out);
</script>
"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if (path := shutil.which(name)) is not None:
            return path
    return None


def _run(binary: str, profile: Path, *args: str) -> str:
    command = [
        binary,
        "--headless",
        "--no-sandbox",  # as root (CI) Chromium refuses to start with its sandbox
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
        *args,
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=RENDER_TIMEOUT_SECONDS, check=False
    )
    assert done.returncode == 0, (command, done.stderr[-2000:])
    return done.stdout


def rendered_rows(binary: str, page: Path, work: Path) -> list[dict[str, Any]]:
    """Each `section.job` row as Chromium laid it out: its job, its label's box and each run
    cell's id, outcome and box (left, top, right, bottom in CSS pixels)."""
    copy = work / "measured.html"
    copy.write_text(
        page.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"), encoding="utf-8"
    )
    dom = _run(binary, work / "profile", "--dump-dom", copy.as_uri())
    start = dom.index('<pre id="measured">') + len('<pre id="measured">')
    text = dom[start : dom.index("</pre>", start)]
    rows: list[dict[str, Any]] = json.loads(html.unescape(text))
    return rows


def screenshot(binary: str, page: Path, path: Path, work: Path) -> Path:
    _run(binary, work / "profile", f"--screenshot={path}", page.as_uri())
    return path


def overlap(a: list[float], b: list[float]) -> bool:
    """Whether two boxes share any area."""
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
