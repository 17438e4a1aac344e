"""Tally of the whole fault set: every bad input eopt's fault suites feed it, by outcome.

The fault suites (``tests/faults`` and the sweep's kill and resume cases in
``tests/sweep``) each feed eopt one bad input, one signal or one kill, and assert what a
user must see. This script runs all of them in one pytest session and watches every call
of eopt's command line (``eopt.cli.main``) they make, so each case is counted by what
eopt *did*, independently of the case's own assertion:

* **crash**: an exception other than a clean exit left ``main``, or stderr showed a
  traceback or an "internal error";
* **hang**: one call ran longer than ``--hang-s`` seconds;
* **silent**: the case failed while every call it made exited 0 (a bad input accepted);
* **lost**: a sweep fault case failed (cells lost or measured twice);
* **other failure**: the case failed for another reason (its message is printed);
* **good**: the case passed, and none of the above was seen.

A real run prints the table per suite and the totals; the targets are 0 crashes, 0 silent
acceptances, 0 hangs and 0 lost results. ``--smoke`` runs one suite's quick cases.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections import Counter
from contextlib import redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as common

NAME = "fault_tally"
SUITES = ("tests/faults", "tests/sweep/test_sweep_resume.py", "tests/sweep/test_library_guard.py")
SMOKE_SUITES = ("tests/faults/test_endless_and_deep.py",)
LOST_SUITES = ("tests/sweep", "tests/faults/test_sweep_faults.py")
OUTCOMES = ("good", "crash", "hang", "silent", "lost", "other failure")
TARGETS = ("crash", "hang", "silent", "lost")


@dataclass
class CaseWatch:
    """What one case's calls of ``eopt.cli.main`` did."""

    calls: int = 0
    exits: list[int] = field(default_factory=list)
    crashed: bool = False
    longest_s: float = 0.0


class Tally:
    """A pytest plugin: wraps ``eopt.cli.main`` and classifies every case."""

    def __init__(self, hang_s: float) -> None:
        self.hang_s = hang_s
        self.current: CaseWatch | None = None
        self.rows: list[tuple[str, str, str]] = []  # (suite, case, outcome)
        self.messages: list[str] = []

    def pytest_configure(self, config: Any) -> None:
        import eopt.cli

        real = eopt.cli.main
        tally = self

        def watched(argv: Any = None, *args: Any, **kwargs: Any) -> Any:
            watch = tally.current if tally.current is not None else CaseWatch()
            watch.calls += 1
            debug = "--debug" in [str(a) for a in (argv or [])] or bool(
                os.environ.get("EOPT_DEBUG")
            )
            started = time.perf_counter()
            err = io.StringIO()
            code = 0
            try:
                with _TeeStderr(err):
                    return real(argv, *args, **kwargs)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                raise
            except KeyboardInterrupt:
                code = 130
                raise
            except BaseException:
                # `--debug` asks for the exception itself: that is not a crash.
                watch.crashed = watch.crashed or not debug
                code = 1
                raise
            finally:
                text = err.getvalue()
                shown = "Traceback (most recent call last)" in text or "internal error" in text
                if shown and not debug:
                    watch.crashed = True
                watch.exits.append(code)
                watch.longest_s = max(watch.longest_s, time.perf_counter() - started)

        eopt.cli.main = watched

    def pytest_runtest_setup(self, item: Any) -> None:
        self.current = CaseWatch()

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when != "call" and not (report.when == "setup" and report.failed):
            return
        watch = self.current or CaseWatch()
        suite = report.nodeid.split("::")[0]
        if watch.crashed:
            outcome = "crash"
        elif watch.longest_s > self.hang_s:
            outcome = "hang"
        elif report.passed:
            outcome = "good"
        elif any(suite.startswith(s) for s in LOST_SUITES):
            outcome = "lost"
        elif watch.calls and all(code == 0 for code in watch.exits):
            outcome = "silent"
        else:
            outcome = "other failure"
        if outcome != "good":
            text = str(report.longrepr).strip().splitlines()
            self.messages.append(f"{outcome}: {report.nodeid}: {text[-1] if text else ''}")
        self.rows.append((suite, report.nodeid, outcome))
        self.current = None


class _TeeStderr:
    """Copies what is written to stderr into a buffer, still writing it through."""

    def __init__(self, buffer: io.StringIO) -> None:
        self.buffer = buffer

    def __enter__(self) -> None:
        self.real = sys.stderr
        buffer = self.buffer
        real = self.real

        class Tee(io.TextIOBase):
            def write(self, s: str) -> int:
                buffer.write(s)
                return real.write(s)

            def flush(self) -> None:
                real.flush()

            def isatty(self) -> bool:
                return real.isatty()

        self.cm = redirect_stderr(Tee())
        self.cm.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.cm.__exit__(*exc)


def main(argv: list[str] | None = None) -> int:
    parser = common.argument_parser(__doc__ or "", 2)
    parser.add_argument("--hang-s", type=float, default=60.0, help="a call this long hangs (60)")
    parser.add_argument("--strict", action="store_true", help="exit 1 unless every target is 0")
    parser.add_argument("--no-save", action="store_true", help=f"do not write {NAME}.json")
    common.add_smoke_option(parser)
    args = parser.parse_args(argv)
    smoke = common.enter_smoke(args)
    suites = SMOKE_SUITES if smoke else SUITES
    import pytest

    tally = Tally(args.hang_s)
    started = time.perf_counter()
    root = Path(common.REPO_DIR)
    pytest_args = ["-q", "-p", "no:cacheprovider", "--no-header", "-rN"]
    code = pytest.main([*pytest_args, *(str(root / s) for s in suites)], plugins=[tally])
    took = time.perf_counter() - started
    by_suite: dict[str, Counter[str]] = {}
    for suite, _case, outcome in tally.rows:
        by_suite.setdefault(suite, Counter())[outcome] += 1
    total: Counter[str] = Counter(outcome for _s, _c, outcome in tally.rows)
    print()
    header = f"{'suite':<44}{'cases':>7}" + "".join(f"{o:>15}" for o in OUTCOMES)
    print(header)
    print("-" * len(header))
    for suite, counts in sorted(by_suite.items()):
        print(
            f"{suite:<44}{sum(counts.values()):>7}"
            + "".join(f"{counts.get(o, 0):>15}" for o in OUTCOMES)
        )
    print(
        f"{'all':<44}{sum(total.values()):>7}" + "".join(f"{total.get(o, 0):>15}" for o in OUTCOMES)
    )
    for line in tally.messages:
        print(f"  {line}")
    print(f"\n{took:.0f} s; pytest exit status {code}")
    verdicts = common.Verdicts()
    for outcome in TARGETS:
        verdicts.check(total.get(outcome, 0) == 0, f"0 {outcome} (got {total.get(outcome, 0)})")
    verdicts.check(bool(tally.rows), "the fault set ran")
    if not smoke and not args.no_save:
        payload = {"suites": list(suites), "total": dict(total), "messages": tally.messages}
        print(f"wrote {common.write_results(NAME, payload)}")
    verdicts.summary()
    return verdicts.exit_status(args.strict)


if __name__ == "__main__":
    common.run_main(main)
