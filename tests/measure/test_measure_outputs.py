"""``eopt measure``'s outputs are checked before the command runs, and run sets resume.

A measurement cannot be repeated for free: every bad output (a file where a folder
should be, an unwritable place, a folder holding another trace, a dangling link, a
folder another run is writing) is refused before the command starts, which the tests
see as the command's marker file never being written. A run set cut short by Ctrl-C or
a kill keeps its finished runs and continues with ``--resume``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import eopt.cli.measure as measure_cli
from eopt.cli import main
from eopt.measure.session import RunOutcome, trace_folder
from eopt.model.trace_io import read_runs
from eopt.runs.runset import RunSetError, record_runs


@pytest.fixture
def gpu(monkeypatch, wall_gpu):
    monkeypatch.setattr(measure_cli, "open_measure_device", lambda backend, spec: wall_gpu())


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _marked(tmp_path: Path) -> list[str]:
    """A command that leaves ``ran`` behind: proof that it started."""
    marker = tmp_path / "ran"
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]


def _refused_before_running(argv: list[str], tmp_path: Path, capsys, said: str) -> None:
    code, err = _run([*argv, "--", *_marked(tmp_path)], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert said in lines[0], lines[0]
    assert not (tmp_path / "ran").exists(), "the command ran before its output was checked"


def test_a_trace_dir_under_a_file_is_refused_before_running(tmp_path, gpu, capsys):
    (tmp_path / "f").write_text("x")
    argv = ["measure", "--trace-dir", str(tmp_path / "f" / "sub")]
    _refused_before_running(argv, tmp_path, capsys, "is a file, not a folder")


@pytest.mark.parametrize(
    ("where", "said"),
    [("f/x.json", "is a file, not a folder"), ("/proc/x.json", "cannot write in /proc")],
)
def test_an_unwritable_output_is_refused_before_running(tmp_path, gpu, capsys, where, said):
    (tmp_path / "f").write_text("x")
    target = where if where.startswith("/") else str(tmp_path / where)
    _refused_before_running(["measure", "-o", target], tmp_path, capsys, said)


def test_a_trace_dir_holding_a_trace_needs_force(tmp_path, gpu, capsys):
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "events.csv").write_text("old")
    _refused_before_running(
        ["measure", "--trace-dir", str(folder)], tmp_path, capsys, "not empty; pass --force"
    )
    code, err = _run(["measure", "--trace-dir", str(folder), "--force", "--", "true"], capsys)
    assert code == 0, err
    assert (folder / "events.csv").read_text() != "old"


def test_a_trace_folder_another_run_writes_is_refused_naming_it(tmp_path, gpu, capsys):
    folder = tmp_path / "t"
    with trace_folder(folder):
        _refused_before_running(
            ["measure", "--trace-dir", str(folder)], tmp_path, capsys, "another eopt run"
        )
    code, err = _run(["measure", "--trace-dir", str(folder), "--", "true"], capsys)
    assert code == 0, err  # free again once the first run is done


@pytest.mark.parametrize("kind", ["dangling", "looping"])
def test_a_broken_output_link_is_kept_without_force(tmp_path, gpu, capsys, kind):
    link = tmp_path / "out.json"
    os.symlink(tmp_path / ("nowhere" if kind == "dangling" else "out.json"), link)
    _refused_before_running(["measure", "-o", str(link)], tmp_path, capsys, "symbolic link")
    assert os.path.islink(link)


class _Recorder:
    """Records runs as tiny trace folders; raises KeyboardInterrupt on one run."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.interrupt_at = interrupt_at
        self.calls = 0

    def __call__(self, folder: Path) -> RunOutcome:
        self.calls += 1
        if self.calls == self.interrupt_at:
            (folder / "events.csv").write_text("half")  # a run cut short
            raise KeyboardInterrupt
        (folder / "events.csv").write_text("id,parent_id,name,category,start_ns,end_ns\n")
        start = 10**18 + self.calls * 10**9
        (folder / "power_samples.csv").write_text(
            "timestamp_ns,domain,device_id,power_watts\n"
            f"{start},GPU,0,100\n{start + 10**8},GPU,0,100\n"
        )
        return RunOutcome(0, start, 0.1, 10.0)


def test_an_interrupted_run_set_keeps_its_runs_and_resumes(tmp_path):
    out = tmp_path / "runs"
    command = ["./bench"]
    with pytest.raises(KeyboardInterrupt):
        record_runs(_Recorder(interrupt_at=3), out, 5, command=command, period_s=0.1)
    index = json.loads((out / "index.json").read_text())
    assert index["state"] == "interrupted" and [r["index"] for r in index["runs"]] == [1, 2]
    first = index["runs"][0]["start_unix_ns"]
    with pytest.raises(RunSetError, match="--resume"):
        record_runs(_Recorder(), out, 5, command=command, period_s=0.1)
    with pytest.raises(RunSetError, match="not this command"):
        record_runs(_Recorder(), out, 5, command=["./other"], period_s=0.1, resume=True)
    again = _Recorder()
    runs = record_runs(again, out, 5, command=command, period_s=0.1, resume=True)
    assert [r.index for r in runs] == [1, 2, 3, 4, 5] and again.calls == 3  # 3, 4 and 5
    assert runs[0].outcome.start_unix_ns == first  # run 1 was kept, not redone
    index = json.loads((out / "index.json").read_text())
    assert index["state"] == "complete" and len(index["runs"]) == 5
    assert (out / "run_003" / "events.csv").read_text() != "half"
    assert len(read_runs(out)) == 5


def test_a_run_set_killed_in_its_first_run_says_so(tmp_path):
    out = tmp_path / "runs"
    with pytest.raises(KeyboardInterrupt):
        record_runs(_Recorder(interrupt_at=1), out, 3, command=["./bench"], period_s=0.1)
    with pytest.raises(ValueError, match=r"no finished run yet \(interrupted\).*--resume"):
        read_runs(out)
