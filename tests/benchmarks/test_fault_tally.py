"""The fault tally's classifier: it names a crash, a silent acceptance and a good error
for what eopt did, whatever the case itself asserted."""

from __future__ import annotations

import pytest

from tests.benchmarks.loader import load_benchmark

CASES = """
import pytest
import eopt.cli

LIB = {lib!r}


def _run(argv):
    try:
        eopt.cli.main(argv)
    except SystemExit as exc:
        return exc.code or 0
    return 0


def test_refused_in_one_line():
    assert _run(["frontier", LIB + ".missing"]) == 1


def test_accepted_but_should_not_be():
    assert _run(["frontier", LIB]) == 1  # a "bad" input eopt accepts: silent


def test_debug_hands_out_the_exception():
    with pytest.raises(Exception):
        eopt.cli.main(["frontier", LIB + ".missing", "--debug"])


def test_internal_error(monkeypatch):
    import eopt.model.library

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(eopt.model.library, "read_library", broken)
    assert _run(["frontier", LIB]) == 1  # the case asserts a refusal; eopt crashed
"""


@pytest.fixture
def tally_module(monkeypatch: pytest.MonkeyPatch):
    return load_benchmark(monkeypatch, "fault_tally")


def test_each_outcome_is_named_for_what_eopt_did(tmp_path, tally_module, monkeypatch):
    import eopt.cli

    lib = tmp_path / "lib.jsonl"
    lib.write_text(
        '{"name": "a", "static_power": 60, "time": 0.01, "dynamic_energy": 0.1}\n',
        encoding="utf-8",
    )
    cases = tmp_path / "test_cases.py"
    cases.write_text(CASES.format(lib=str(lib)), encoding="utf-8")
    monkeypatch.setattr(eopt.cli, "main", eopt.cli.main)  # restored after the run
    tally = tally_module.Tally(hang_s=60.0)
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(cases)],
                       plugins=[tally])  # fmt: skip
    assert code == 1  # two of the cases fail
    outcomes = {node.split("::")[-1]: outcome for _suite, node, outcome in tally.rows}
    assert outcomes == {
        "test_refused_in_one_line": "good",
        "test_debug_hands_out_the_exception": "good",
        "test_accepted_but_should_not_be": "silent",
        "test_internal_error": "crash",
    }
