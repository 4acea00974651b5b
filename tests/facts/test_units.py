import pytest

from paradvisor.units import parse_bandwidth, parse_latency, parse_size


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1 Gbit/s", 125e6),
        ("1 Gb/s", 125e6),
        ("400 Gbit/s", 50e9),
        ("25 GB/s", 25e9),
        ("100 MB/s", 100e6),
        ("10Gbps", 1.25e9),
    ],
)
def test_bandwidth(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected)


def test_bytes_and_bits_differ_by_case():
    assert parse_bandwidth("8 GB/s") == pytest.approx(8 * parse_bandwidth("8 Gb/s"))


@pytest.mark.parametrize("text,expected", [("5 us", 5e-6), ("20 ms", 0.02), ("1 s", 1.0), ("300 ns", 3e-7)])
def test_latency(text, expected):
    assert parse_latency(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["fast", "10", "-1 GB/s", "10 parsecs", ""])
def test_bad_bandwidth(bad):
    with pytest.raises(ValueError, match="expected a bandwidth"):
        parse_bandwidth(bad)


def test_size():
    assert parse_size("24 GiB") == 24 * 2**30
