"""``eopt compose``: compose library signatures along an expression or a schedule."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from eopt.cli._common import UserError, console, write_json
from eopt.cli.options import confidence_option, json_option, quiet_option
from eopt.model.units import (
    QuantityError,
    format_energy,
    format_percent,
    format_power,
    format_sigma,
    format_time,
    parse_quantity,
)

# The calculus and the library files load when the command runs, not for its --help.
if TYPE_CHECKING:
    from eopt.calculus.contextual_schedule import Substitution
    from eopt.calculus.schedule import DeviceUsage
    from eopt.calculus.uncertainty import BiasBound, DeviationResult
    from eopt.model.library import Library
    from eopt.model.signature import Signature

__all__ = ["command"]


def _parse_idle_power(text: str | None) -> float | dict[str, float] | None:
    """``60W`` → 60.0; ``gpu0=55W,gpu1=60`` → a mapping device → W.

    Raises:
        UserError: naming --idle-power (and the device) for anything else.
    """
    if text is None:
        return None
    try:
        if "=" not in text:
            return parse_quantity(text, "W", what="--idle-power")
        out: dict[str, float] = {}
        for part in text.split(","):
            device, sep, value = part.partition("=")
            if not sep or not device.strip():
                raise UserError(
                    f"--idle-power {part!r}: expected DEVICE=WATTS, e.g. gpu0=55W,gpu1=60W"
                )
            out[device.strip()] = parse_quantity(value, "W", what=f"--idle-power {device.strip()}")
        return out
    except QuantityError as exc:
        raise UserError(str(exc)) from None


def _parse_measured(text: str | None) -> tuple[float, float] | None:
    """``3.4`` or ``3.4J`` or ``3.4±0.05`` or ``3.4+-0.05`` (J; kJ/mJ too) → (E, σ).

    Raises:
        UserError: naming --measured for anything but a finite E ≥ 0 and σ ≥ 0.
    """
    if text is None:
        return None
    raw = text.replace("+/-", "±").replace("+-", "±")
    energy, _, std = raw.partition("±")
    try:
        value = parse_quantity(energy, "J", what="--measured")
        sigma = parse_quantity(std, "J", what="--measured σ") if std.strip() else 0.0
    except QuantityError as exc:
        raise UserError(f"{exc} (write an energy like 3.4J or 3.4J±0.05J)") from None
    return value, sigma


def _null_context(library: Library) -> Library:
    """What names resolve to: each element's context-independent values.

    Values characterized at other contexts (a signature with a ``context``) are for the
    interaction graph; they would make a name ambiguous. An element known only at a
    context (a co-run pair's composite) stays resolvable.
    """
    from eopt.model.library import Library

    plain = {s.name for s in library if s.context is None}
    return Library(s for s in library if s.context is None or s.name not in plain)


def _report(
    sig: Signature,
    confidence: float,
    bias: BiasBound | None,
    deviation: DeviationResult | None,
    usage: list[DeviceUsage] | None = None,
    substitutions: list[Substitution] | None = None,
) -> dict[str, Any]:
    from eopt.calculus.uncertainty import prediction_interval

    interval = prediction_interval(sig, confidence)
    out: dict[str, Any] = {
        "schema": "eopt.composition/1",
        "term": sig.term,
        "energy_j": sig.energy,
        "std_energy_j": sig.std_energy,
        "interval_j": {"low": interval.low, "high": interval.high, "confidence": confidence},
        "static_energy_j": sig.static_energy,
        "dynamic_energy_j": sig.dynamic_energy,
        "static_power_w": sig.static_power,
        "time_s": sig.time,
        "std_time_s": sig.std_time,
        "devices": list(sig.devices),
    }
    if bias is not None:
        total = bias.total_interval(sig)
        out["reduction_bias_j"] = bias.bias
        out["interval_with_bias_j"] = {"low": total.low, "high": total.high}
    if substitutions is not None:
        # What the interaction graph replaced; everything else is in the bias bound.
        out["interactions"] = [
            {
                "edge": sub.edge,
                "device": sub.device,
                "start_s": sub.start_s,
                "elements": list(sub.elements),
                "context": sub.context,
                "energy_shift_j": sub.energy_shift_j,
            }
            for sub in substitutions
        ]
    if deviation is not None:
        out["deviation_test"] = {
            "passed": deviation.passed,
            "deviation_j": deviation.deviation,
            "threshold_j": deviation.threshold,
            "z": deviation.z,
        }
    if usage is not None:
        out["per_device"] = [
            {
                "device": u.device,
                "busy_s": u.busy_s,
                "idle_s": u.idle_s,
                "busy_static_energy_j": u.busy_static_j,
                "idle_energy_j": u.idle_j,
                "dynamic_energy_j": u.dynamic_j,
                "energy_j": u.energy_j,
            }
            for u in usage
        ]
    out["signature"] = sig.to_dict()
    return out


def _print(data: dict[str, Any], confidence: float) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    e, lo, hi = data["energy_j"], data["interval_j"]["low"], data["interval_j"]["high"]
    static = data["static_energy_j"]
    table.add_row("term", escape(data["term"]))
    spread = format_sigma(data["std_energy_j"], "J")
    if data["std_energy_j"] > 0:
        spread += (
            f"; {format_percent(confidence, 0)} interval {format_energy(lo)} – {format_energy(hi)}"
        )
    table.add_row("energy", f"{format_energy(e)}  ({spread})")
    share = static / e if e > 0 else 0.0
    table.add_row(
        "static",
        f"{format_energy(static)}  ({format_percent(share)}; "
        f"{format_power(data['static_power_w'])} over "
        f"{format_time(data['time_s'])})",
    )
    table.add_row("dynamic", format_energy(data["dynamic_energy_j"]))
    table.add_row(
        "time", f"{format_time(data['time_s'])}  ({format_sigma(data['std_time_s'], 's')})"
    )
    if data["devices"]:
        table.add_row("devices", escape(", ".join(data["devices"])))
    if "reduction_bias_j" in data:
        total = data["interval_with_bias_j"]
        table.add_row(
            "bias bound",
            f"{data['reduction_bias_j']:.3g} J (Reduction Theorem; with it "
            f"{format_energy(total['low'])} – {format_energy(total['high'])})",
        )
    if "interactions" in data:
        used = data["interactions"]
        shift = sum(u["energy_shift_j"] for u in used)
        edges = sorted({u["edge"] for u in used})
        table.add_row(
            "interactions",
            f"{len(used)} characterized use(s) of {len(edges)} edge(s)"
            + (f" ({escape(', '.join(edges))}; {shift:+.4g} J)" if used else ""),
        )
    if "deviation_test" in data:
        t = data["deviation_test"]
        verdict = "[green]agrees[/]" if t["passed"] else "[bold red]deviates[/]"
        table.add_row(
            "measured",
            f"{verdict}: |ΔE| = {t['deviation_j']:.4g} J vs {t['threshold_j']:.4g} J "
            f"(z = {t['z']:.3g})",
        )
    console.print(table, highlight=False)
    if "per_device" in data:
        per = Table("device", "busy", "idle", "idle energy", "energy", box=None, pad_edge=False)
        for row in data["per_device"]:
            share = row["idle_energy_j"] / row["energy_j"] if row["energy_j"] > 0 else 0.0
            per.add_row(
                escape(row["device"]),
                format_time(row["busy_s"]),
                format_time(row["idle_s"]),
                f"{format_energy(row['idle_energy_j'])} ({format_percent(share)})",
                format_energy(row["energy_j"]),
            )
        console.print(per, highlight=False)


@click.command("compose")
@click.argument("args", nargs=-1, required=True, metavar="LIB.jsonl... [EXPR]")
@click.option(
    "--schedule",
    "schedule_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Placements file (YAML/JSON list of {element, device, start}), or a schedule "
    "written by `eopt solve`, instead of EXPR.",
)
@click.option(
    "--idle-power",
    "idle_power_text",
    metavar="W|DEV=W,...",
    help="Draw of idle gaps and padding (default: each device's static power).",
)
@click.option(
    "--time-mean",
    type=click.Choice(["max_of_means", "expected_max"]),
    default="max_of_means",
    show_default=True,
    help="Makespans of ⊕/⊕multi: the paper's max of the mean times (the planned value) or "
    "E[max], the mean a measurement averages to (docs/uncertainty.md).",
)
@confidence_option("Confidence of the printed interval.")
@click.option(
    "--measured",
    metavar="J[±σ]",
    help="A direct measurement of the same composition: runs the deviation test (Eq. 23).",
)
@click.option(
    "--graph",
    "graph_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Interaction graph (eopt.interactions/1): pairs in it compose with their "
    "characterized values (with --schedule); the bias bound covers the rest.",
)
@json_option("Print JSON for machines.")
@quiet_option()
def command(
    args: tuple[str, ...],
    schedule_file: Path | None,
    graph_file: Path | None,
    idle_power_text: str | None,
    time_mean: str,
    confidence: float,
    measured: str | None,
    as_json: bool,
) -> None:
    """Compose signatures from libraries along EXPR or a placed schedule.

    EXPR uses seq/par/par_multi (or ⊗ ⊕ ⊕multi, or >> | ||); a name may carry a
    selector when the library holds it at several κ or ω, e.g. gemm[impl=cutlass].
    Prints the total energy with its interval, the static/dynamic split, the time and
    the operator term.

    \b
    Examples:
      eopt compose examples/attention.jsonl "seq(prefix, par(compute, allreduce))"
      eopt compose examples/attention.jsonl "prefix >> (compute | allreduce)" --json
      eopt compose examples/figure2_library.jsonl --schedule examples/figure2_schedule.yaml
      eopt compose lib.jsonl "gemm[impl=cutlass,sm_clock_mhz=1200] ⊗ idle(2ms, 60W)"
      eopt compose plan.signatures.jsonl --schedule schedule.json --measured 253.4J±0.5J
      eopt compose lib.jsonl contextual.jsonl --schedule s.yaml --graph interactions.json
    """
    from eopt.calculus.contextual import ContextOutsideError
    from eopt.calculus.contextual_schedule import compose_with_interactions
    from eopt.calculus.expression import ExpressionError, expression_bias, parse_expression
    from eopt.calculus.expression import evaluate as evaluate_expression
    from eopt.calculus.interactions import InteractionsError, read_interactions
    from eopt.calculus.operators import CompositionError
    from eopt.calculus.schedule import (
        compose_schedule,
        read_placements,
        schedule_bias,
        schedule_breakdown,
    )
    from eopt.calculus.uncertainty import deviation_test
    from eopt.model.library import Library, LibraryError

    if schedule_file is None:
        if len(args) < 2:
            raise UserError(
                "give at least one library and an expression, e.g. "
                'eopt compose lib.jsonl "seq(a, par(b, c))", or use --schedule FILE'
            )
        libraries, expression = list(args[:-1]), args[-1]
    else:
        libraries, expression = list(args), None
    if graph_file is not None and schedule_file is None:
        raise UserError("--graph applies to a placed schedule: add --schedule FILE")
    measured_value = _parse_measured(measured)
    try:
        idle_power = _parse_idle_power(idle_power_text)
        library = Library.load(*libraries)
        if not len(library):
            raise UserError(f"no signatures in {', '.join(libraries)}")
        bias: BiasBound | None = None
        usage: list[DeviceUsage] | None = None
        substitutions: list[Substitution] | None = None
        if expression is not None:
            if expression.endswith(".jsonl") and Path(expression).exists():
                raise UserError(
                    f"{expression} looks like a library, not an expression; add the "
                    'expression last, e.g. "seq(a, b)", or use --schedule FILE'
                )
            tree = parse_expression(expression)
            names = _null_context(library)
            sig = evaluate_expression(tree, names, expression, idle_power, time_mean)
            bias = expression_bias(tree, names, confidence, idle_power=idle_power)
        else:
            assert schedule_file is not None
            placements = read_placements(schedule_file, _null_context(library))
            if idle_power is None:
                idle_power = placements.idle_power
            graph = read_interactions(graph_file) if graph_file is not None else None
            try:
                if graph is None:
                    sig = compose_schedule(placements.placements, idle_power, time_mean=time_mean)
                    bias = schedule_bias(placements.placements, confidence, idle_power=idle_power)
                    usage = schedule_breakdown(placements.placements, idle_power)
                else:
                    result = compose_with_interactions(
                        placements.placements,
                        library,
                        graph,
                        idle_power,
                        confidence=confidence,
                        time_mean=time_mean,
                    )
                    sig, bias = result.signature, result.bias
                    usage = schedule_breakdown(result.placements, idle_power)
                    substitutions = list(result.substitutions)
            except ContextOutsideError as exc:
                raise UserError(f"{schedule_file} with {graph_file}: {exc}") from None
            except (CompositionError, ValueError) as exc:
                raise UserError(f"{schedule_file}: {exc}") from None
    except (ExpressionError, LibraryError, InteractionsError, ValueError) as exc:
        raise UserError(str(exc)) from None
    deviation = deviation_test(sig, measured_value, confidence) if measured_value else None
    data = _report(sig, confidence, bias, deviation, usage, substitutions)
    if as_json:
        write_json("-", data)
    else:
        _print(data, confidence)
