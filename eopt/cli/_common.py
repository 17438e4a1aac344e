"""Helpers shared by the CLI commands: console, errors, small parsers."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from eopt.model.fileformats import atomic_write_text, dumps_json, json_ready
from eopt.model.units import QuantityError, parse_fraction, parse_quantity

__all__ = [
    "FiniteRange",
    "Fraction",
    "GpuList",
    "Quantity",
    "UserError",
    "check_output",
    "console",
    "err_console",
    "force_option",
    "parse_percent",
    "quiet_option",
    "report_error",
    "write_json",
]

console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # errors stay one line


class UserError(click.ClickException):
    """An error caused by input, shown as one line without a traceback."""

    def show(self, file: Any = None) -> None:
        err_console.print(f"[bold red]error:[/] {escape(self.format_message())}", highlight=False)


# Error types whose message is written for users (bad input, missing rights …).
_USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, KeyError, OSError, LookupError)


def _is_user_error(exc: BaseException) -> bool:
    if isinstance(exc, _USER_ERRORS):
        return True
    # Errors of the device layer and the solvers are written for users too.
    module = type(exc).__module__
    return module.startswith(("eopt.", "solvers"))


def report_error(exc: BaseException) -> int:
    """Print ``exc`` as a one-line error; returns the exit status (1 or 2)."""
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    if _is_user_error(exc):
        err_console.print(f"[bold red]error:[/] {escape(str(message))}", highlight=False)
        return 1
    err_console.print(
        f"[bold red]internal error:[/] {type(exc).__name__}: {escape(str(message))}\n"
        "Run again with --debug for the traceback.",
        highlight=False,
    )
    return 2


def parse_percent(text: str, what: str = "value") -> float:
    """``"5%"`` → 0.05, ``"0.05"`` → 0.05; a bare ``5`` is refused (did you mean 5%?).

    Raises:
        UserError: for anything else (see :func:`eopt.model.units.parse_fraction`).
    """
    try:
        return parse_fraction(text, what=what)
    except QuantityError as exc:
        raise UserError(str(exc)) from None


def _option_name(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] or list(
        getattr(param, "opts", [])
    )
    return opts[0] if opts else (param.name or "value").upper()


class Quantity(click.ParamType):
    """A click type for a quantity with an optional unit, read by
    :func:`eopt.model.units.parse_quantity`: ``--deadline 3s``, ``--idle-power 83.64W``.

    Args:
        unit: ``"s"``, ``"W"``, ``"J"`` or ``"MHz"``; bare numbers are in it.
        positive: Refuse 0.
        maximum: Largest value accepted, in ``unit``.
    """

    def __init__(self, unit: str, *, positive: bool = False, maximum: float | None = None) -> None:
        self.unit, self.positive, self.maximum = unit, positive, maximum
        self.name = {"s": "seconds", "W": "watts", "J": "joules", "MHz": "MHz"}[unit]

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        """``3s``-style placeholders in --help."""
        return {"s": "TIME", "W": "POWER", "J": "ENERGY", "MHz": "CLOCK"}[self.unit]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The value in ``unit``.

        Raises:
            UserError: one line naming the option, what was read and an example.
        """
        try:
            return parse_quantity(
                value,
                self.unit,
                what=_option_name(param),
                positive=self.positive,
                maximum=self.maximum,
            )
        except QuantityError as exc:
            raise UserError(str(exc)) from None


class Fraction(click.ParamType):
    """A click type for ``5%`` or ``0.05`` (bare values above 1 are refused)."""

    name = "percent"

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        """``PERCENT`` in --help."""
        return "PERCENT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The fraction (0.05 for ``5%``).

        Raises:
            UserError: naming the option; a bare ``5`` asks "did you mean 5%?".
        """
        return parse_percent(value, _option_name(param))


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN (which passes every comparison)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The number, checked to be finite and in range.

        Raises:
            UserError: naming the option, for NaN and infinities.
        """
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            raise UserError(f"{_option_name(param)}: must be a finite number, got {value!r}")
        return number


class GpuList(click.ParamType):
    """A click type for distinct GPU indices ``0,1,2,3`` (integers ≥ 0)."""

    name = "gpus"

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        """``0,1,…`` in --help."""
        return "0,1,…"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The indices as a list.

        Raises:
            UserError: for anything but distinct integers ≥ 0.
        """
        if isinstance(value, list):
            return value
        where = _option_name(param)
        parts = [p.strip() for p in str(value).split(",")]
        if not all(p.isdigit() for p in parts):
            raise UserError(
                f"{where} {value!r}: expected GPU indices (integers ≥ 0) separated by commas, "
                "e.g. 0,1,2,3"
            )
        gpus = [int(p) for p in parts]
        twice = sorted({g for g in gpus if gpus.count(g) > 1})
        if twice:
            raise UserError(
                f"{where} {value!r}: GPU {twice[0]} is given twice; each stage needs its own GPU"
            )
        return gpus


def check_output(path: str | Path | None, force: bool, option: str = "--output") -> None:
    """The overwrite rule every eopt command follows: an existing output file is kept
    unless ``--force`` is given.

    Raises:
        UserError: naming the file and the fix, when it exists and ``force`` is False.
    """
    if path is None or str(path) == "-" or force:
        return
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {p}: is a folder; name a file to write")
    if p.exists():
        raise UserError(
            f"{option} {p}: the file exists; pass --force to overwrite it, or choose another name"
        )


def quiet_option(fn: Any) -> Any:
    """``-q/--quiet``: no progress, tables or notes on stdout; errors and warnings still
    show on stderr, and ``--json`` still prints."""

    def silence(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        if value:
            console.quiet = True
        return value

    return click.option(
        "-q",
        "--quiet",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=silence,
        help="No progress bar, tables or notes; errors still show.",
    )(fn)


def force_option(fn: Any) -> Any:
    """``--force``: overwrite existing output files (see :func:`check_output`)."""
    return click.option(
        "--force", is_flag=True, help="Overwrite output files that exist (kept otherwise)."
    )(fn)


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented strict JSON to ``path`` (``-`` for stdout).

    A number that is not finite is unknown here (a mean power of no time, an
    unbounded ratio): it is written as ``null``, since JSON has no NaN or Infinity and
    a reader (Perfetto, ``json.loads`` of another language) would refuse the file. A file
    is replaced atomically (a new temporary file beside it, then a rename).
    """
    text = dumps_json(json_ready(data), str(path), indent=2, ensure_ascii=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(path, text)
