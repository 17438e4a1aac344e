"""Helpers shared by the CLI commands: console, errors, small parsers.

The options that several commands share are in :mod:`eopt.cli.options`.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

__all__ = [
    "FiniteRange",
    "Fraction",
    "GpuList",
    "Number",
    "Probability",
    "Quantity",
    "UserError",
    "check_output",
    "check_output_dir",
    "console",
    "err_console",
    "note",
    "parse_percent",
    "report_error",
    "show_warning",
    "write_json",
]

#: The width of output into a pipe or a file, in columns: wide enough that no table cell
#: or line is wrapped (a reader of a log or a `grep` wants one record a line).
PIPE_WIDTH = 4000


def _width() -> int | None:
    """None (Rich measures the terminal, or reads $COLUMNS) for a terminal; else wide."""
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return None
    return PIPE_WIDTH


console = Console(width=_width())
err_console = Console(stderr=True, soft_wrap=True)  # errors stay one line


class UserError(click.ClickException):
    """An error caused by input, shown as one line without a traceback."""

    def show(self, file: Any = None) -> None:
        err_console.print(f"[bold red]error:[/] {escape(self.format_message())}", highlight=False)


# Error types whose message is written for users (bad input, missing rights …).
_USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, KeyError, OSError, LookupError)


def note(text: str) -> None:
    """Say something worth knowing on stderr, one line (stdout stays the result's)."""
    err_console.print(f"note: {escape(text)}", highlight=False)


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning`` for the CLI: ``warning: <message>``, one line on stderr.

    The message already names the file and the place; Python's own rendering (the
    module, the line of eopt's source) is for developers (``--debug``).
    """
    del category, filename, lineno, file, line
    err_console.print(f"[yellow]warning:[/] {escape(str(message))}", highlight=False)


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
    from eopt.model.units import QuantityError, parse_fraction

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
        from eopt.model.units import QuantityError, parse_quantity

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


class Probability(Fraction):
    """A click type for a confidence, ``95%`` or ``0.95``: strictly between 0 and 1."""

    name = "probability"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The probability (0.95 for ``95%``).

        Raises:
            UserError: naming the option, outside (0, 1); a bare ``95`` asks for ``95%``.
        """
        p = super().convert(value, param, ctx)
        if not 0.0 < p < 1.0:
            raise UserError(
                f"{_option_name(param)}: a probability strictly between 0 and 1 (e.g. 95% or "
                f"0.95), got {value!r}"
            )
        return p


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


class Number(click.ParamType):
    """A finite number in a range, given bare or with its unit; errors are one line.

    ``--cooldown 2``, ``--cooldown 2s`` and ``--cooldown 500ms`` are 2 s, 2 s and 0.5 s;
    any other suffix (``2m``, ``2W``) is refused rather than guessed.

    Args:
        kind: ``int`` or ``float``.
        lo: Smallest value allowed.
        hi: Largest value allowed.
        unit: The option's unit (``s``; empty for counts).
        lo_open: Whether ``lo`` itself is excluded.
        hi_open: Whether ``hi`` itself is excluded.
    """

    name = "number"

    def __init__(
        self, kind: type = float, lo: float = 0.0, hi: float = math.inf, unit: str = "",
        lo_open: bool = False, hi_open: bool = False,
    ) -> None:  # fmt: skip
        self.kind, self.lo, self.hi, self.unit = kind, lo, hi, unit
        self.lo_open, self.hi_open = lo_open, hi_open

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        """``SECONDS`` or ``N`` in --help."""
        return "SECONDS" if self.unit == "s" else "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """Parse and check ``value``.

        Raises:
            UserError: naming the option, the allowed range and an example.
        """
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            number = self._parse(str(value).strip(), param)
        if not math.isfinite(number) or not self._inside(number):
            raise UserError(f"{self._name(param)} {value}: {self._expected()}")
        if self.kind is int:
            if not number.is_integer():
                raise UserError(f"{self._name(param)} {value}: {self._expected()}")
            return int(number)
        return number

    def _parse(self, text: str, param: click.Parameter | None) -> float:
        scale = 1.0
        if self.unit == "s":
            for suffix, factor in (("ms", 1e-3), ("s", 1.0)):
                if text.lower().endswith(suffix):
                    text, scale = text[: -len(suffix)].strip(), factor
                    break
        try:
            return float(text) * scale
        except ValueError:
            raise UserError(f"{self._name(param)} {text!r}: {self._expected()}") from None

    def _inside(self, x: float) -> bool:
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below

    def _name(self, param: click.Parameter | None) -> str:
        return param.opts[0] if param is not None and param.opts else "value"

    def _expected(self) -> str:
        what = "a whole number" if self.kind is int else "a number"
        unit = " s (a bare number, or with s or ms)" if self.unit == "s" else ""
        low = f"> {self.lo:g}" if self.lo_open else f"≥ {self.lo:g}"
        top = f"{self.hi:.0f}" if self.kind is int else f"{self.hi:g}"
        high = f" and {'<' if self.hi_open else '≤'} {top}" if math.isfinite(self.hi) else ""
        return f"expected {what} {low}{high}{unit}"


def check_output(path: str | Path | None, force: bool, option: str = "--output") -> None:
    """The overwrite rule every eopt command follows: an existing output file is kept
    unless ``--force`` is given.

    Raises:
        UserError: naming the file and the fix, when it exists and ``force`` is False.
    """
    if path is None or str(path) == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {p}: is a folder; name a file to write")
    if not force and os.path.lexists(p):
        if p.is_symlink() and not p.exists():
            raise UserError(
                f"{option} {p}: a symbolic link to {os.readlink(p)!r}, which does not exist (or "
                "loops); pass --force to replace the link, or choose another name"
            )
        raise UserError(
            f"{option} {p}: the file exists; pass --force to overwrite it, or choose another name"
        )
    _check_writable(p.parent, option, p)


def check_output_dir(path: str | Path | None, force: bool, option: str = "--trace-dir") -> None:
    """The overwrite rule for an output folder (a trace, a run set), checked before work.

    Raises:
        UserError: when ``path`` is a file, cannot be created, or is a folder that is not
            empty and ``force`` is False.
    """
    if path is None:
        return
    p = Path(path)
    if os.path.lexists(p) and not p.is_dir():
        raise UserError(f"{option} {p}: exists and is not a folder; name a folder")
    if p.is_dir():
        if not force and any(p.iterdir()):
            raise UserError(
                f"{option} {p}: the folder is not empty; pass --force to write into it, or "
                "choose a new folder"
            )
        _check_writable(p, option, p)
        return
    _check_writable(p.parent, option, p)


def _check_writable(folder: Path, option: str, target: Path) -> None:
    """Refuse a place eopt cannot write, before anything runs (a file named as a folder,
    a missing folder, /proc, a read-only mount), with the reason in words."""
    folder = folder if str(folder) else Path(".")
    below = folder
    while not below.exists() and below != below.parent:
        below = below.parent
    if not below.is_dir():
        raise UserError(f"{option} {target}: {below} is a file, not a folder")
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=below, prefix=".eopt-write-check-"):
            pass
    except OSError as exc:
        raise UserError(
            f"{option} {target}: cannot write in {below} ({exc.strerror or exc}); choose "
            "another place"
        ) from None


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented strict JSON to ``path`` (``-`` for stdout).

    A number that is not finite is unknown here (a mean power of no time, an
    unbounded ratio): it is written as ``null``, since JSON has no NaN or Infinity and
    a reader (Perfetto, ``json.loads`` of another language) would refuse the file. A file
    is replaced atomically (a new temporary file beside it, then a rename).
    """
    from eopt.model.fileformats import atomic_write_text, dumps_json, json_ready

    text = dumps_json(json_ready(data), str(path), indent=2, ensure_ascii=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(path, text)
