"""Running eopt commands as a user would: through the console entry point."""

from __future__ import annotations

from eopt.cli import main


def run_eopt(*args: object) -> int:
    """``eopt ARGS`` through the console entry point; its exit status."""
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
