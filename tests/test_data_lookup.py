"""The one test-data lookup (``data_file`` in tests/conftest.py) reads tests/data only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# Every file the suite reads through the fixture; each must ship with the repository.
NEEDED = [
    "perseus_sosp24/stage_profile/gpt3-175b+a100_sxm_bf16.csv",
    "perseus_sosp24/stage_profile/bloom+a100_sxm_bf16.csv",
    "lowtime_bench/s4_m8_u1ms/dag.json",
    "lowtime_bench/s4_m8_u1ms/profile.csv",
    "lowtime_bench/s4_m8_u1ms/summary.json",
    "kokkos_dbscan_h100/README.md",
    "dvfs/nv_dvfs_benchmark/v100-dvfs-real-profile.csv",
    "dvfs/nv_dvfs_benchmark/rtx8000-dvfs-real-profile.csv",
    "dvfs/hkbu_gpu_dvfs_job_schedule/gtx2070s-dvfs-real-Performance-Power.csv",
]


@pytest.mark.parametrize("relative", NEEDED)
def test_needed_data_ships_in_tests_data(relative: str, data_file: Callable[[str], Path]) -> None:
    found = data_file(relative)
    assert found == TESTS / "data" / relative
    assert found.stat().st_size > 0


def test_every_shipped_folder_is_listed_and_copied_data_say_where_they_came_from() -> None:
    index = (TESTS / "data" / "README.md").read_text()
    folders = [p for p in (TESTS / "data").iterdir() if p.is_dir()]
    assert folders
    for folder in folders:
        assert f"`{folder.name}/" in index, f"{folder} is not listed in tests/data/README.md"
    for copied in sorted({Path(r).parts[0] for r in NEEDED}):
        readme = TESTS / "data" / copied / "README.md"
        assert readme.is_file(), f"{copied} has no README.md with its provenance"


def test_reads_nothing_outside_tests_data(
    tmp_path: Path, data_file: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A data folder named in the environment (as benchmarks use) is not a source for tests.
    extra = tmp_path / "bench" / "only_here.csv"
    extra.parent.mkdir()
    extra.write_text("a,b\n1,2\n")
    monkeypatch.setenv("EOPT_DATA_DIR", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match=r"not found in .*tests/data"):
        data_file("bench/only_here.csv")


def test_missing_data_fails_naming_where_to_put_it(data_file: Callable[[str], Path]) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"copy it into tests/data/nope/x\.csv"):
        data_file("nope/x.csv")
