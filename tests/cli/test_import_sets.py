"""Start-up: each command imports only what it uses.

Every row runs one fresh interpreter that invokes the command the way the console
script does and then reports ``sys.modules``; the heavy modules the row forbids must be
absent. A row also checks that the command did what it was asked (its help printed, or
its result), so that a command that failed to load cannot pass by importing nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eopt.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DBSCAN = ROOT / "tests" / "data" / "kokkos_dbscan_h100"

# Runs the command as `eopt ARGS…` does, then prints its exit status, what it wrote
# on stdout and every module loaded, as one JSON line on the real stdout.
PROBE = """
import contextlib, io, json, sys
from eopt.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
print(json.dumps({"code": code, "stdout": out.getvalue(), "modules": sorted(sys.modules)}))
"""

#: What no command needs to show its help.
GRAPHS_PLOTS_SOLVERS = ("networkx", "matplotlib", "highspy", "solvers", "eopt.plan")
#: ... nor its statistics and calculus.
NO_SCIENCE = (*GRAPHS_PLOTS_SOLVERS, "scipy", "eopt.calculus")
#: ... nor NumPy, for commands whose options come from no numerical module.
LIGHT = (*NO_SCIENCE, "numpy", "eopt.sim")

#: `eopt --help` lists the commands; it needs click and nothing of eopt's library.
TOP = (
    *LIGHT, "yaml", "rich.console", "eopt.devices", "eopt.measure",
    # Of the model layer only eopt.model.lazy (the packages' lazy names) may load.
    "eopt.model.fileformats", "eopt.model.units", "eopt.model.signature",
    "eopt.model.library", "eopt.model.trace", "eopt.model.planfile", "eopt.model.schedule",
)  # fmt: skip

#: command line → modules it must not import.
HELP_ROWS: dict[str, tuple[str, ...]] = {
    "--help": TOP,
    "demo --help": LIGHT,
    # The sweep's option types and its library module come with NumPy.
    "sweep --help": NO_SCIENCE,
    "measure --help": NO_SCIENCE,
    "profile --help": LIGHT,
    "attribute --help": NO_SCIENCE,
    "kokkos --help": LIGHT,
    "kokkos build --help": LIGHT,
    "kokkos env --help": LIGHT,
    "compare --help": NO_SCIENCE,
    "frontier --help": LIGHT,
    "compose --help": LIGHT,
    "check --help": LIGHT,
    # The pipeline generator's limits are in the help; plan files bring NetworkX.
    "plan --help": ("matplotlib", "highspy", "solvers", "scipy", "eopt.calculus", "numpy"),
    "plan pipeline --help": ("matplotlib", "highspy", "solvers", "scipy", "numpy"),
    # The solver's table of methods is the help: the solver loads, plots do not.
    "solve --help": ("matplotlib", "scipy.stats", "eopt.report", "eopt.check", "eopt.sim"),
    "apply --help": LIGHT,
    "reset --help": LIGHT,
    "report --help": LIGHT,
    "trace --help": LIGHT,
    "sim --help": LIGHT,
    "sim fit --help": LIGHT,
    "library --help": LIGHT,
    "library merge --help": LIGHT,
}


def probe(args: list[str], cwd: Path = ROOT) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "EOPT_DEBUG"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["stderr"] = done.stderr
    return report


def loaded(report: dict, forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden packages that were imported (a package or any module inside it)."""
    modules = report["modules"]
    return [f for f in forbidden if any(m == f or m.startswith(f + ".") for m in modules)]


@pytest.mark.parametrize("line", list(HELP_ROWS))
def test_help_imports_none_of_the_heavy_modules(line: str) -> None:
    report = probe(line.split())
    assert report["code"] == 0, report["stderr"]
    assert "Usage:" in report["stdout"], report["stdout"] + report["stderr"]
    assert not loaded(report, HELP_ROWS[line])


def test_every_command_has_a_row() -> None:
    rows = {line.split()[0] for line in HELP_ROWS if line != "--help"}
    assert rows == set(COMMANDS)


def test_the_probe_sees_a_heavy_import() -> None:
    """The check can fail: running a solve's help does load the solver and NumPy."""
    report = probe(["solve", "--help"])
    assert loaded(report, ("solvers", "numpy", "highspy")) == ["solvers", "numpy", "highspy"]


def test_attribute_charges_a_trace_without_plans_or_graphs(tmp_path: Path) -> None:
    run = DBSCAN / "fdbscan" / "illyad-2495425"
    report = probe(["attribute", str(run), "--json"])
    assert report["code"] == 0, report["stderr"]
    data = json.loads(report["stdout"])
    assert data["regions"], "the run's regions were attributed"
    assert not loaded(report, ("networkx", "eopt.plan", "scipy", "matplotlib", "solvers"))


def _runs(source: Path, target: Path, count: int) -> Path:
    """The first ``count`` connector runs of ``source`` (each run: its three CSV files)."""
    target.mkdir()
    prefixes = sorted({p.name.split("-nvml-")[0] for p in source.glob("*-nvml-*.csv")})
    for prefix in prefixes[:count]:
        for path in source.glob(f"{prefix}-nvml-*.csv"):
            shutil.copy(path, target / path.name)
    return target


def test_compare_imports_scipy_only_when_it_computes(tmp_path: Path) -> None:
    a = _runs(DBSCAN / "fdbscan", tmp_path / "a", 3)
    b = _runs(DBSCAN / "fdbscan-dense", tmp_path / "b", 3)
    refused = probe(["compare", str(tmp_path / "missing"), str(b)])
    assert refused["code"] == 1 and "not a folder of runs" in refused["stderr"]
    assert not loaded(refused, ("scipy", "networkx", "eopt.plan"))
    # Three runs a side: too few to look for blocks in another machine state, which is
    # the one step that needs scipy's rank test.
    done = probe(["compare", str(a), str(b), "--region", "DBSCANCalculation", "--json"])
    assert done["code"] == 0, done["stderr"]
    assert json.loads(done["stdout"])["schema"] == "eopt.comparison/1"
    assert not loaded(done, ("scipy", "networkx", "eopt.plan"))


def test_import_eopt_loads_no_library_until_a_name_is_used() -> None:
    code = (
        "import sys, eopt; before = 'numpy' in sys.modules; sig = eopt.Signature; "
        "print(before, 'eopt.model.signature' in sys.modules, sig.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["False", "True", "Signature"]


@pytest.mark.parametrize("package", ["eopt", "eopt.calculus", "eopt.plan", "eopt.report"])
def test_every_exported_name_of_a_lazy_package_resolves(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute"):
        module.no_such_name  # noqa: B018
