"""Shared test configuration."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("MPLBACKEND", "Agg")

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")

#: Data shipped with the repository for the tests (see tests/data/README.md).
TEST_DATA_DIR = Path(__file__).resolve().parent / "data"


def find_test_data(relative: str | os.PathLike[str]) -> Path:
    """The one lookup of test data: ``tests/data/<relative>``, and nowhere else.

    The repository ships what the tests need, so the suite passes on a fresh clone with
    no data folder beside it.

    Args:
        relative: A path relative to tests/data, e.g.
            ``"perseus_sosp24/stage_profile/gpt3-175b+a100_sxm_bf16.csv"``.

    Returns:
        The existing file or folder.

    Raises:
        pytest.fail: when tests/data lacks it (a missing file fails the test; it is
            never skipped).
    """
    rel = Path(relative)
    if rel.is_absolute():
        raise ValueError(f"test data path must be relative to tests/data, got {rel}")
    shipped = TEST_DATA_DIR / rel
    if shipped.exists():
        return shipped
    pytest.fail(
        f"test data {rel} not found in {TEST_DATA_DIR}; copy it into tests/data/{rel} "
        "(and note its source in that folder's README.md)",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def data_file() -> Callable[[str], Path]:
    """``data_file("lowtime_bench/s4_m8_u1ms/dag.json")`` → the file (see find_test_data)."""
    return find_test_data


@pytest.fixture(autouse=True)
def _no_real_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Keep eopt's state files (saved GPU settings) out of the user's home during tests."""
    monkeypatch.setenv("EOPT_STATE_DIR", str(tmp_path_factory.mktemp("eopt-state")))


@pytest.fixture(autouse=True)
def _loud_console() -> Iterator[None]:
    """``-q`` silences eopt's module-level console; a test that invokes a command with it
    must not silence the tests after it (the ``eopt`` group resets it per invocation)."""
    yield
    from eopt.cli._common import console

    console.quiet = False
    console.file = None  # type: ignore[assignment]
