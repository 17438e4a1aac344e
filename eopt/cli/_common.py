"""Helpers shared by the CLI commands: console, errors, small parsers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

__all__ = ["UserError", "console", "err_console", "parse_percent", "report_error", "write_json"]

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


def parse_percent(text: str) -> float:
    """``"5%"`` → 0.05, ``"0.05"`` → 0.05.

    Raises:
        click.BadParameter: for anything else.
    """
    raw = text.strip()
    try:
        if raw.endswith("%"):
            return float(raw[:-1]) / 100.0
        return float(raw)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a fraction like 0.05 or 5%") from None


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` (``-`` for stdout)."""
    text = json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
    else:
        Path(path).write_text(text, encoding="utf-8")
