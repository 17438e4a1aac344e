"""`eopt.model.units`: reading quantities with units, percents, and writing them back."""

from __future__ import annotations

import math

import pytest

from eopt.model.units import (
    QuantityError,
    format_energy,
    format_percent,
    format_power,
    format_sigma,
    format_time,
    parse_fraction,
    parse_power_w,
    parse_quantity,
    parse_time_s,
)


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [
        ("3s", "s", 3.0),
        ("3 s", "s", 3.0),
        ("250ms", "s", 0.25),
        ("40us", "s", 4e-05),
        ("40µs", "s", 4e-05),
        ("3ns", "s", 3e-09),
        ("2min", "s", 120.0),
        ("2.5", "s", 2.5),
        (".5", "s", 0.5),
        ("1e-3", "s", 0.001),
        ("83.64W", "W", 83.64),
        ("83.64 w", "W", 83.64),
        ("250000mW", "W", 250.0),
        ("1.2kW", "W", 1200.0),
        ("5.2J", "J", 5.2),
        ("1.2kJ", "J", 1200.0),
        ("500mJ", "J", 0.5),
        ("2MJ", "J", 2e6),
        ("1Wh", "J", 3600.0),
        ("1410MHz", "MHz", 1410.0),
        ("1410 mhz", "MHz", 1410.0),
        ("1.41GHz", "MHz", 1410.0),
        (1410, "MHz", 1410.0),
        (0.25, "s", 0.25),
    ],
)
def test_quantities_are_read_into_the_canonical_unit(
    text: str | float, unit: str, value: float
) -> None:
    assert parse_quantity(text, unit) == pytest.approx(value, rel=1e-15)


def test_milliwatts_and_megawatts_are_never_confused() -> None:
    assert parse_power_w("500mW") == 0.5
    with pytest.raises(QuantityError, match="MW is megawatts; write mW for milliwatts"):
        parse_power_w("500MW", "--idle-power")


def test_sub_unit_prefixes_divide_exactly() -> None:
    # 40 × 1e-6 is 3.9999999999999996e-05 in floating point; 40 / 1e6 is exact.
    assert parse_time_s("40us") == 4e-05
    assert parse_power_w("83640mW") == 83.64


@pytest.mark.parametrize(
    ("text", "unit", "message"),
    [
        ("nan", "s", "must be a finite number"),
        ("inf", "W", "must be a finite number"),
        ("-1", "s", "must be a finite number ≥ 0 s"),
        ("-1W", "W", "must be a finite number ≥ 0 W"),
        ("3 parsecs", "s", "'parsecs' is not a unit of time"),
        ("3m", "s", "m is ambiguous"),
        ("3W", "s", "'W' is not a unit of time"),
        ("3s", "W", "'s' is not a unit of power"),
        ("", "s", "cannot read ''"),
        ("W", "W", "cannot read 'W'"),
        ("1,5", "s", "',5' is not a unit of time"),
        (True, "s", "expected a number"),
    ],
)
def test_bad_quantities_are_refused_naming_the_place(
    text: str | bool, unit: str, message: str
) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text, unit, what="--here")  # type: ignore[arg-type]
    assert str(info.value).startswith("--here: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_positive_and_maximum_bounds() -> None:
    assert parse_quantity("0", "s") == 0.0
    with pytest.raises(QuantityError, match="must be > 0 s"):
        parse_quantity("0s", "s", positive=True)
    with pytest.raises(QuantityError, match="at most 10 s"):
        parse_quantity("11", "s", maximum=10)
    assert parse_quantity("-2", "s", allow_negative=True) == -2.0


def test_unknown_canonical_unit_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown unit 'V'"):
        parse_quantity("3", "V")


@pytest.mark.parametrize(
    ("text", "value"),
    [("5%", 0.05), ("5 %", 0.05), ("0.05", 0.05), ("1", 1.0), ("0", 0.0), ("150%", 1.5)],
)
def test_fractions_and_percents(text: str, value: float) -> None:
    assert parse_fraction(text) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5", "5 would mean 500%; did you mean 5%?"),
        ("1.5", "1.5 would mean 150%; did you mean 1.5%?"),
        ("nan", "must be a finite percent"),
        ("-5%", "must be a finite percent ≥ 0"),
        ("five", "cannot read 'five'"),
    ],
)
def test_bad_fractions_are_refused(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=r"^--slowdown: ") as info:
        parse_fraction(text, what="--slowdown")
    assert message in str(info.value)


def test_fraction_maximum() -> None:
    with pytest.raises(QuantityError, match="at most 100%"):
        parse_fraction("150%", maximum=1.0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (601.085, "601.1 s"),
        (2.8365, "2.837 s"),  # round half to even on the float nearest 2.8365
        (0.0501616, "0.05016 s"),
        (0.00432, "0.00432 s"),
        (9.99996, "10 s"),
        (1.5e-05, "1.5e-05 s"),
        (0.0, "0 s"),
        (3.0, "3 s"),
    ],
)
def test_times_are_written_in_seconds_with_four_digits(seconds: float, text: str) -> None:
    assert format_time(seconds) == text


@pytest.mark.parametrize("seconds", [601.085, 2.8365, 0.0501616, 1.5e-05, 123456.0])
def test_written_times_read_back_to_four_digits(seconds: float) -> None:
    assert parse_time_s(format_time(seconds)) == pytest.approx(seconds, rel=5e-4)


def test_energy_power_percent() -> None:
    assert format_energy(3.32) == "3.32 J"
    assert format_energy(242647.6) == "242648 J"
    assert format_energy(5719.94) == "5719.9 J"
    assert format_power(83.64) == "83.64 W"
    assert format_percent(0.155) == "15.5 %"
    assert format_percent(0.05, sign=True) == "+5.0 %"
    assert parse_quantity(format_energy(5719.94), "J") == pytest.approx(5719.9)


def test_sigma_is_labelled_and_zero_is_never_printed_as_exact() -> None:
    assert format_sigma(1.234, "J") == "σ 1.2 J"
    assert format_sigma(0.0, "J") == "σ unknown (no spread recorded)"
    assert format_sigma(math.nan, "s") == "σ unknown (no spread recorded)"
    assert "± 0" not in format_sigma(0.0, "J")
