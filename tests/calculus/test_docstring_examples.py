"""The examples in the calculus modules' docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "eopt.calculus.operators",
    "eopt.calculus.schedule",
    "eopt.calculus.uncertainty",
    "eopt.calculus.expression",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failures, attempted = doctest.testmod(module, verbose=False)
    assert attempted > 0, f"{name} has no docstring examples"
    assert failures == 0
