"""Parsing and printing of quantities with units at the program's edges."""

import pytest

from sgdscale.errors import UserError
from sgdscale.units import (
    format_bandwidth,
    format_bytes,
    format_seconds,
    parse_bandwidth_bps,
    parse_size_bytes,
    parse_time_s,
    parse_workers,
)


@pytest.mark.parametrize("text, bps", [
    ("10Gbit", 10e9), ("10Gbps", 10e9), ("200Mbit", 200e6), ("1.25GB/s", 10e9), ("100MiB/s", 100 * 2**20 * 8),
    ("1e9bit", 1e9), ("10G", 10e9), (5e6, 5e6),
])
def test_bandwidth(text, bps):
    assert parse_bandwidth_bps(text) == pytest.approx(bps)


# A bare "10" is 10 bit/s to a program and 10 Gbit/s to most readers: text needs a unit.
@pytest.mark.parametrize("text", ["-10Gbit", "0Mbit", "fast", "10Qbit", "10", "1e9"])
def test_bad_bandwidth(text):
    with pytest.raises(UserError):
        parse_bandwidth_bps(text)


def test_times_and_sizes():
    assert parse_time_s("20us") == pytest.approx(20e-6)
    assert parse_time_s("1.5ms") == pytest.approx(1.5e-3)
    assert parse_time_s("0") == 0
    assert parse_size_bytes("25MB") == 25e6
    assert parse_size_bytes("1MiB") == 2**20
    with pytest.raises(UserError):
        parse_time_s("-1ms")
    with pytest.raises(UserError):
        parse_time_s("3 fortnights")


def test_workers():
    assert parse_workers("1,2,4") == [1, 2, 4]
    assert parse_workers("1-4") == [1, 2, 3, 4]
    assert parse_workers("1-64:x2") == [1, 2, 4, 8, 16, 32, 64]
    for bad in ("0", "-2", "4-1", "a", "1-8:x1"):
        with pytest.raises(UserError):
            parse_workers(bad)


def test_formatting_rounds_before_choosing_the_unit():
    assert format_bandwidth(999.9e6) == "1 Gbit/s"
    assert format_seconds(0.99996) == "1 s"
    assert format_seconds(0.0123) == "12.3 ms"
    assert format_bytes(97.5e6) == "97.5 MB"
