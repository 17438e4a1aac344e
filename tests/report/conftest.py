"""Fixtures for the report tests: a small two-stage schedule with known numbers, and
headless Chromium to render a report in (offline) and read back its DOM and pixels."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from eopt.model.operating_point import OperatingPoint
from eopt.model.schedule import DeviceInfo, Schedule, ScheduledElement


def _element(
    name: str,
    etype: str,
    device: str,
    start: float,
    duration: float,
    clock: float,
    power_w: float,
    dyn_w: float,
) -> ScheduledElement:
    return ScheduledElement(
        name=name,
        type=etype,
        device=device,
        start=start,
        duration=duration,
        energy=power_w * duration,
        dynamic_energy=dyn_w * duration,
        impl="cublas",
        op_point=OperatingPoint(sm_clock_mhz=clock),
        var_energy=0.04,
    )


@pytest.fixture
def schedule() -> Schedule:
    """Two stages, four elements at two clocks, gaps on both devices.

    stage0: F[s0,m0] 0–0.10 @1410 (300 W), F[s0,m1] 0.10–0.22 @1200 (250 W), idle to 0.40.
    stage1: F[s1,m0] 0.10–0.20 @1410 (300 W), B[s1,m0] 0.25–0.40 @1005 (200 W).
    Idle power 60 W on both. Dynamic power = mean power − 100 W.
    """
    elements = (
        _element("F[s0,m0]", "stage0.forward", "stage0", 0.00, 0.10, 1410, 300, 200),
        _element("F[s0,m1]", "stage0.forward", "stage0", 0.10, 0.12, 1200, 250, 150),
        _element("F[s1,m0]", "stage1.forward", "stage1", 0.10, 0.10, 1410, 300, 200),
        _element("B[s1,m0]", "stage1.backward", "stage1", 0.25, 0.15, 1005, 200, 100),
    )
    devices = (DeviceInfo("stage0", 60.0, 0), DeviceInfo("stage1", 60.0, 1))
    energy = 30 + 30 + 30 + 30 + 60 * (0.40 - 0.22) + 60 * (0.40 - 0.25)  # 139.8 J
    return Schedule(
        elements=elements,
        devices=devices,
        makespan=0.40,
        energy=energy,
        energy_std=1.5,
        deadline=0.42,
        lower_bound=138.0,
        gap=(energy - 138.0) / energy,
        solver={"name": "CBC", "method": "milp", "status": "optimal", "wall_time_s": 0.2},
        baseline={"energy": 150.0, "makespan": 0.38, "label": "every element at its fastest cell"},
    )


# Headless Chromium --------------------------------------------------------------------------
# Every request goes to a dead proxy and no name resolves: a page that needed the network
# would lose those resources, but must still render completely.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def chromium_path() -> str:
    """The Chromium binary; a missing one fails the test (never skips it)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "Chromium is needed for this test: install it with `apt-get install -y chromium` "
        "(scripts/test.sh does this when run as root)."
    )


@dataclass
class Node:
    """An element of the DOM Chromium dumped: tag, attributes, children, own text."""

    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        """Descendants (and self) of that tag and/or CSS class."""
        return [
            n
            for n in self.walk()
            if (tag is None or n.tag == tag) and (cls is None or cls in n.classes())
        ]

    def all_text(self) -> str:
        return " ".join(t for n in self.walk() for t in [n.text.strip()] if t)


class _TreeBuilder(HTMLParser):
    _VOID = frozenset({"meta", "br", "img", "link", "input", "hr", "wbr", "col", "area"})

    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in self._VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


@dataclass
class Rendered:
    """A page as Chromium rendered it: the DOM it built and its screenshot (RGB)."""

    dom: Node
    png: np.ndarray

    def pixels_near(self, color: str, tolerance: int = 10) -> np.ndarray:
        """(y, x) of the screenshot's pixels within ``tolerance`` of ``#rrggbb``."""
        rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)])
        close = np.all(np.abs(self.png.astype(int) - rgb) <= tolerance, axis=2)
        return np.argwhere(close)


@pytest.fixture
def render_in_chromium(tmp_path: Path):
    """Render an HTML file in headless Chromium, offline: its DOM and a screenshot."""

    def render(page: Path, height: int = 1600, width: int = 1100) -> Rendered:
        from PIL import Image

        shot = tmp_path / f"{page.stem}.png"
        result = subprocess.run(
            [
                chromium_path(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={tmp_path / ('profile-' + page.stem)}",
                "--dump-dom",
                f"--screenshot={shot}",
                f"--window-size={width},{height}",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert "</html>" in result.stdout, "Chromium dumped no document"
        builder = _TreeBuilder()
        builder.feed(result.stdout)
        builder.close()
        with Image.open(shot) as image:
            png = np.asarray(image.convert("RGB"))
        assert png.shape[:2] == (height, width)
        return Rendered(builder.root, png)

    return render
