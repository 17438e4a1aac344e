"""The ``eopt`` command line: a thin layer over the library.

Each subcommand lives in its own module (``eopt/cli/<name>.py``) exposing ``command``;
modules load only when their command runs, so ``eopt --help`` stays fast. This module
itself imports click and nothing of rich or of eopt's library: the console and the error
reporting load when a command runs or fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import click

__all__ = ["hoist_debug", "main"]

# name → (module, one-line help shown by `eopt --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("eopt.cli.demo", "Run the whole pipeline on the simulated GPU in under a minute."),
    "sweep": ("eopt.cli.sweep", "Measure a kernel over implementations × operating points."),
    "library": ("eopt.cli.library", "Join signature libraries: the shards of one sweep."),
    "measure": ("eopt.cli.measure", "Measure the energy of one command and its regions."),
    "profile": ("eopt.cli.profile", "Characterize a marked program's elements in place."),
    "attribute": ("eopt.cli.attribute", "Charge a recorded trace's energy to regions and kernels."),
    "kokkos": ("eopt.cli.kokkos", "Build or attach eopt's Kokkos Tools connector."),
    "compare": ("eopt.cli.compare", "Does variant B really cost less than A over repeated runs?"),
    "frontier": ("eopt.cli.frontier", "Print or plot the time–energy Pareto frontier."),
    "compose": ("eopt.cli.compose", "Compose signatures along an expression or a schedule."),
    "check": ("eopt.cli.check", "Run a schedule, test its prediction, and explain a deviation."),
    "plan": ("eopt.cli.plan", "Generate plans (e.g. 1F1B pipelines) from profiles."),
    "solve": ("eopt.cli.solve", "Choose κ and ω per element: minimum energy under a deadline."),
    "apply": ("eopt.cli.apply", "Set the clocks / power limits of a schedule through NVML."),
    "reset": ("eopt.cli.reset", "Restore GPUs that a killed eopt run left changed."),
    "report": ("eopt.cli.report", "Write a standalone HTML report."),
    "trace": ("eopt.cli.trace", "Export a Perfetto / Chrome trace."),
    "sim": ("eopt.cli.sim", "Fit the simulated GPU to measurements of your own GPU."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (mod, _) in COMMANDS.items() if _module_exists(mod)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or not _module_exists(entry[0]):
            return None
        return importlib.import_module(entry[0]).command  # type: ignore[no-any-return]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="eopt")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """eopt — measure, compose and optimize GPU energy.

    \b
    Characterize:  eopt sweep sim:gemm --clocks all -o gemm.jsonl
    Compose:       eopt compose lib.jsonl "seq(a, par(b, c))"
    Optimize:      eopt solve plan.yaml --slowdown 5% -o schedule.json
    Act:           eopt apply schedule.json --dry-run

    Without an NVIDIA GPU, eopt uses its built-in simulated GPU and says so.
    """
    from eopt.cli._common import console

    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug or bool(os.environ.get("EOPT_DEBUG"))
    # One process may run several commands (tests, notebooks): --quiet and --json's
    # stdout are per command.
    console.quiet = False
    console.file = None  # type: ignore[assignment]  # None: follow sys.stdout


# `eopt` alone shows the help (click ≥ 8.2 raises it as a usage error).
_NO_ARGS_IS_HELP: type[click.UsageError] | tuple[()] = getattr(
    click.exceptions, "NoArgsIsHelpError", ()
)


def hoist_debug(args: list[str]) -> tuple[list[str], bool]:
    """Move ``--debug`` given anywhere among eopt's own arguments to the front.

    ``eopt solve plan.yaml --debug`` then means what ``eopt --debug solve plan.yaml``
    does. Arguments after ``--`` belong to the user's command (``eopt apply s.json
    --until-exit -- python train.py --debug``) and are left alone.

    Returns:
        The arguments to parse and whether debugging was asked for.
    """
    cut = args.index("--") if "--" in args else len(args)
    own = [a for a in args[:cut] if a != "--debug"]
    debug = len(own) != cut
    return (["--debug"] if debug else []) + own + args[cut:], debug


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the ``eopt`` console script."""
    args, debug = hoist_debug(list(argv if argv is not None else sys.argv[1:]))
    debug = debug or bool(os.environ.get("EOPT_DEBUG"))
    if debug:
        return _main(args, debug)
    import warnings

    with warnings.catch_warnings():  # the one-line rendering, for this command only
        warnings.showwarning = _show_warning
        return _main(args, debug)


def _show_warning(*args: Any, **kwargs: Any) -> None:
    # Imported when a warning is shown: `eopt --help` loads no console.
    from eopt.cli._common import show_warning

    show_warning(*args, **kwargs)


def _main(args: list[str], debug: bool) -> Any:
    try:
        return cli.main(args=args, prog_name="eopt", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except _NO_ARGS_IS_HELP as exc:  # `eopt` or `eopt plan` alone: the help itself
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        from rich.markup import escape

        from eopt.cli._common import err_console

        # One line, like every other error: the message and where the help is (click's
        # own rendering adds the usage line and a blank line around it).
        where = exc.ctx.command_path if exc.ctx is not None else "eopt"
        err_console.print(
            f"[bold red]error:[/] {escape(exc.format_message())} (see {where} --help)",
            highlight=False,
        )
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except Exception as exc:
        if debug:
            raise
        from eopt.cli._common import report_error

        sys.exit(report_error(exc))
