"""The report renders in a real headless browser with the network cut off."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from eopt.model.operating_point import OperatingPoint
from eopt.model.signature import Signature
from eopt.report import write_report

# Every request goes to a dead proxy and no name resolves: a page that needed the
# network would lose those resources, but must still render completely.
_OFFLINE = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--no-first-run",
    "--no-default-browser-check",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "Chromium is needed for this test: install it with `apt-get install -y chromium` "
        "(scripts/test.sh does this when run as root)."
    )


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_chromium(), *_OFFLINE, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_report_renders_offline_in_chromium(schedule, tmp_path):
    lib = [
        Signature(
            "stage0.forward",
            100.0,
            t,
            d,
            var_energy=0.01,
            impl="cublas",
            op_point=OperatingPoint(sm_clock_mhz=c),
        )
        for c, t, d in [(1410, 0.10, 20.0), (1200, 0.12, 18.0), (1005, 0.15, 17.5)]
    ]
    page = write_report(tmp_path / "report.html", schedule=schedule, library=lib)
    source = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", source)

    dom = _run(["--dump-dom", page.as_uri()], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The browser parsed the inline SVG into the DOM: the charts and their marks exist.
    assert 'aria-label="Schedule per device"' in dom.stdout
    assert 'aria-label="Plan time–energy frontier"' in dom.stdout
    assert dom.stdout.count('class="element"') == len(schedule.elements)
    assert "</svg>" in dom.stdout and "</html>" in dom.stdout

    shot = tmp_path / "report.png"
    result = _run(
        [f"--screenshot={shot}", "--window-size=1100,1700", "--hide-scrollbars", page.as_uri()],
        tmp_path / "profile-shot",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # A rendered page, not a blank one: a blank 1100×1700 PNG compresses to a few kB.
    assert len(data) > 30_000
