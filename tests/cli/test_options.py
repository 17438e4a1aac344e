"""The options several commands share are one definition each (eopt.cli.options)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import click
import pytest

from eopt.cli import COMMANDS, cli, main

ROOT = Path(__file__).resolve().parents[2]


def every_command() -> Iterator[tuple[str, click.Command]]:
    """(command path, command) for every command and subcommand of ``eopt``."""
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None, name
        yield name, command
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                yield f"{name} {sub_name}", sub


def options_named(flag: str) -> list[tuple[str, click.Option]]:
    return [
        (path, p)
        for path, command in every_command()
        for p in command.params
        if isinstance(p, click.Option) and flag in p.opts
    ]


def test_json_is_one_flag_with_one_name_everywhere() -> None:
    found = options_named("--json")
    assert len(found) >= 10
    for path, option in found:
        assert option.is_flag and option.name == "as_json", path
        assert option.help, path


def test_quiet_is_the_same_eager_flag_everywhere() -> None:
    found = options_named("--quiet")
    assert len(found) >= 10
    for path, option in found:
        assert option.opts == ["-q", "--quiet"] and option.is_flag, path
        assert option.is_eager and option.callback is not None, path


def test_force_is_a_flag_everywhere() -> None:
    found = options_named("--force")
    assert len(found) >= 8
    assert all(option.is_flag and option.name == "force" for _, option in found)


def test_gpu_backends_come_from_the_registry() -> None:
    from eopt.devices.backends import BACKENDS, gpu_backend_choices

    gpu = [(p, o) for p, o in options_named("--backend") if "sim" in o.type.choices]
    assert {p for p, _ in gpu} == {"apply", "sweep"}
    for _, option in gpu:
        assert tuple(option.type.choices) == gpu_backend_choices()
        assert set(option.type.choices) == {"auto", *(b.name for b in BACKENDS)}


def test_sim_model_default_is_a_packaged_profile() -> None:
    from eopt.sim.profiles import available_profiles

    found = [
        *options_named("--sim-model"),
        *[x for x in options_named("--model") if x[0] == "check"],
    ]
    assert {p for p, _ in found} == {"apply", "sweep", "check", "profile"}
    defaults = {option.default for _, option in found}
    assert len(defaults) == 1 and defaults <= set(available_profiles())


def test_domain_and_meter_method_choices_are_the_library_s() -> None:
    from eopt.measure.meter import MeterMethod
    from eopt.model.trace import DOMAINS

    domains = options_named("--domain")
    assert {p for p, _ in domains} == {"attribute", "compare"}
    assert all(tuple(o.type.choices) == DOMAINS for _, o in domains)
    methods = [(p, o) for p, o in options_named("--method") if p in ("measure", "sweep")]
    assert len(methods) == 2
    assert all(tuple(o.type.choices) == get_args(MeterMethod) for _, o in methods)


def test_gpu_and_gpus_share_their_help() -> None:
    from eopt.cli.options import GPU_HELP, GPUS_HELP

    gpu = [(p, o) for p, o in options_named("--gpu") if o.help == GPU_HELP]
    assert {p for p, _ in gpu} == {"measure", "sweep", "profile"}
    assert all(o.default == "0" for _, o in gpu)
    assert [p for p, o in options_named("--gpus") if o.help == GPUS_HELP] == ["measure"]


@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet_silences_stdout_and_keeps_the_files(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """frontier's --quiet is the shared one now: no tables, and the CSV is still written."""
    library = str(ROOT / "examples" / "attention.jsonl")
    main(["frontier", library, "--csv", str(tmp_path / "loud.csv")])
    assert "on the frontier" in capsys.readouterr().out
    quiet_csv = tmp_path / "quiet.csv"
    main(["frontier", library, "--csv", str(quiet_csv), flag])
    assert capsys.readouterr().out == ""
    assert quiet_csv.read_text() == (tmp_path / "loud.csv").read_text()


def test_a_bad_backend_is_one_line_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    from eopt.devices.backends import gpu_backend_choices

    with pytest.raises(SystemExit) as exit_info:
        main(["apply", "s.json", "--backend", "amd"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error:") and "--backend" in err
    assert all(repr(name) in err for name in gpu_backend_choices())
