"""``eopt sim``: the simulated GPU. ``eopt sim fit`` fits it to a measured library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from eopt.cli._common import UserError, check_output, console, write_json
from eopt.cli.options import force_option, json_option

__all__ = ["command"]

_DEFAULT_BASE = "A100-SXM4-80GB"


@click.group("sim", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """The simulated GPU: fit its physics to measurements of your own GPU.

    \b
    Examples:
      eopt sweep mymod:kernel --clocks all -o lib.jsonl     # on the real GPU
      eopt sim fit lib.jsonl -o my-gpu.json
      eopt sweep sim:gemm --sim-model my-gpu.json -o gemm.jsonl
    """


def _base_profile(requested: str | None, library_model: str | None) -> tuple[str, str]:
    """The packaged profile to start from, and why it was chosen."""
    from eopt.sim.profiles import available_profiles, load_profile

    names = available_profiles()
    if requested is not None:
        if requested not in names:
            raise UserError(
                f"--base {requested}: not a built-in GPU profile; choose one of {', '.join(names)}"
            )
        return requested, "given with --base"
    if library_model:
        for name in names:
            profile = load_profile(name)
            if library_model in (name, profile.nvml_name, profile.model):
                return name, f"the library's device model {library_model!r}"
    why = (
        f"no built-in profile matches the library's device {library_model!r}"
        if library_model
        else "the library names no device model"
    )
    return _DEFAULT_BASE, f"{why}; pass --base MODEL for a closer clock table"


@command.command("fit")
@click.argument("library", metavar="LIB.jsonl", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PROFILE.json",
    help="Write the fitted profile (.json or .yaml); use it with --sim-model PROFILE.json.",
)
@click.option(
    "--holdout",
    type=click.Choice(["clocks", "kernels"]),
    default="clocks",
    show_default=True,
    help="Judge the fit on held-out interior clocks, or on whole held-out kernels.",
)
@click.option(
    "--base",
    metavar="MODEL",
    help="Built-in profile to start from (clock table, limits, peaks); default: the "
    "library's device model when built in, else A100-SXM4-80GB.",
)
@click.option("--model", "model_name", metavar="NAME", help="Model name the profile carries.")
@json_option("Print the errors and fit as JSON.")
@force_option()
def fit_command(
    library: Path,
    output: Path | None,
    holdout: str,
    base: str | None,
    model_name: str | None,
    as_json: bool,
    force: bool,
) -> None:
    """Fit the simulated GPU's physics to a signature library measured on your GPU.

    The library's signatures (one kernel at several SM clocks or power limits: eopt
    sweep --clocks) give time, static power and dynamic energy per setting; the fit
    finds the GPU's voltage curve, static power, how much the SM clock limits memory
    traffic, and one demand per kernel. The table shows the error on data the fit did
    not see: interior clocks left out (--holdout clocks), or whole kernels left out,
    their demand then fitted at four clocks only (--holdout kernels).

    \b
    Examples:
      eopt sim fit lib.jsonl
      eopt sim fit lib.jsonl -o my-gpu.json --holdout kernels
      eopt sim fit lib.jsonl --base V100-PCIE-16GB --json
    """
    from eopt.sim.fit import (
        SimFitError,
        cannot_serve,
        fit_sim,
        holdout_error,
        optimum_checks,
        profile_document,
        reaches_board_limit,
        read_library_table,
        summary_metrics,
    )
    from eopt.sim.profiles import load_profile

    try:
        table, library_model = read_library_table(library)
    except SimFitError as exc:
        raise UserError(str(exc)) from None
    base_name, base_why = _base_profile(base, library_model)
    profile = load_profile(base_name)
    check_output(output, force)
    # A sweep that ran into the board's power limit is fitted with that limit.
    capped = reaches_board_limit(table, profile)
    try:
        held = holdout_error(table, profile, holdout, board_limit=capped)
    except SimFitError as exc:
        raise UserError(f"{exc} (--holdout {holdout})") from None
    fit = fit_sim(table, profile, board_limit=capped)
    metrics = summary_metrics(table, fit)
    model = model_name or (f"{library_model}-fit" if library_model else f"{library.stem}-fit")
    provenance = (
        f"Fitted by `eopt sim fit` to {library.name}: {held.n_kernels} kernels at "
        f"{held.n_settings} settings; held-out {holdout}: power "
        f"{100 * held.power_err:.1f} %, time {100 * held.time_err:.1f} % (mean |relative|). "
        f"Clock table and limits from {base_name} ({base_why})."
    )
    result: dict[str, Any] = {
        "library": str(library),
        "base": base_name,
        "model": model,
        "heldout": held.to_dict(),
        **metrics,
        "fit_rms": fit.rms,
        "fit_converged": fit.success,
        "physics": fit.physics.to_dict(),
        "optimum": [c.to_dict() for c in optimum_checks(table, fit)],
        "cannot_serve": cannot_serve(table, profile),
    }
    if output is not None:
        doc = profile_document(fit, base_name, profile, model, provenance, result["heldout"])
        if output.suffix.lower() in (".yaml", ".yml"):
            import yaml

            from eopt.model.fileformats import SAFE_DUMPER, atomic_write_text

            text = yaml.dump(doc, Dumper=SAFE_DUMPER, sort_keys=False, allow_unicode=True)
            atomic_write_text(output, text)
        else:
            write_json(output, doc)
        result["profile"] = str(output)
    if as_json:
        write_json("-", result)
        return
    _print(result, fit.physics, base_why)


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _print(result: dict[str, Any], phys: Any, base_why: str) -> None:
    held = result["heldout"]
    table = Table(
        title=f"Held-out error ({held['holdout']}): {held['n_held']} points the fit did not see",
        title_justify="left",
    )
    for col in ("quantity", "mean |error|", "max |error|"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    table.add_row("power", _pct(held["power_err"]), _pct(held["power_err_max"]))
    table.add_row("time", _pct(held["time_err"]), _pct(held["time_err_max"]))
    table.add_row("energy", _pct(held["energy_err"]), "")
    console.print(table)
    slow = (
        f"{result['mem_slowdown_data']:.2f}× measured, {result['mem_slowdown_sim']:.2f}× "
        f"simulated ({result['n_memory_bound']} memory-bound kernels, at "
        f"{result['lowest_frac']:.2f} of the top setting)"
        if result["mem_slowdown_data"] is not None
        else "no memory-bound kernels found"
    )
    lines = [
        f"{held['n_kernels']} kernels × {held['n_settings']} settings; base profile "
        f"{result['base']} ({base_why})",
        f"energy-optimal setting: {result['eopt_frac_data']:.2f} of the top measured, "
        f"{result['eopt_frac_sim']:.2f} simulated",
        f"memory-bound slowdown at the lowest setting: {slow}",
        f"voltage floor {phys.v_min:.3f} up to {phys.knee_mhz:.0f} MHz, static "
        f"{phys.p_const_w:.1f} W + leakage {phys.p_leak_w:.1f} W, memory side on the SM "
        f"clock {phys.mem_core_share:.2f}",
    ]
    checks = result["optimum"]
    missed = [c for c in checks if not c["ok"]]
    lines.append(
        f"energy-optimal setting per kernel: {len(checks) - len(missed)} of {len(checks)} "
        "within one setting or 1 % of the measured minimum energy"
        + (
            "; missed: "
            + ", ".join(
                f"{c['kernel']} ({c['fit_setting']:g} vs {c['data_setting']:g}, "
                f"+{100 * c['extra_energy']:.1f} %)"
                for c in missed[:4]
            )
            if missed
            else ""
        )
    )
    lines += [f"cannot serve: {line}" for line in result["cannot_serve"]]
    if not result["fit_converged"]:
        lines.append("note: the optimizer stopped at its evaluation limit; the fit may improve")
    if "profile" in result:
        lines.append(
            f"Wrote {result['profile']} (use: eopt sweep sim:gemm --sim-model {result['profile']})"
        )
    for line in lines:
        console.print(escape(line), highlight=False)
