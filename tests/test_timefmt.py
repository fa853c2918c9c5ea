"""RFC 3339 timestamps and protobuf Duration strings: one formatter for the REST output, describe and text."""

import pytest

from trials.timefmt import duration, parse_rfc3339, rfc3339


@pytest.mark.parametrize("s,text", [(12.5, "12.5s"), (3600, "3600s"), (0.000001, "0.000001s"), (0, "0s")])
def test_duration(s, text):
    assert duration(s) == text


def test_rfc3339_round_trips_to_the_microsecond():
    assert rfc3339(0) == "1970-01-01T00:00:00.000000Z"
    assert parse_rfc3339(rfc3339(1789.25)) == 1789.25
    assert parse_rfc3339("2026-11-30T05:30:27.5Z") == parse_rfc3339("2026-11-30T05:30:27.500000Z")


@pytest.mark.parametrize("text", ["", "garbage", "2026-11-30T05:30:27Z", "2026-11-30T05:30:27.123456",
                                  "2026-11-30T05:30:27.123456+01:00", "2026-13-30T05:30:27.000000Z",
                                  "2026-02-30T05:30:27.000000Z", "2026-11-30T05:30:27.1234567Z",
                                  " 2026-11-30T05:30:27.000000Z", "2026-11-30T05:30:27.000000Z\n"])
def test_parse_rfc3339_takes_only_what_rfc3339_writes(text):
    with pytest.raises(ValueError):
        parse_rfc3339(text)


def test_parsing_a_timestamp_imports_no_strptime():
    import subprocess
    import sys

    code = ("import sys; from trials.timefmt import parse_rfc3339; parse_rfc3339('2026-11-30T05:30:27.000000Z'); "
            "print('_strptime' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_an_end_is_its_start_plus_the_monotonic_time_since():
    from trials.timefmt import wall_after

    assert wall_after(1000.0, 50.0, 62.5) == 1012.5  # whatever the wall clock says meanwhile
    assert wall_after(1000.0, 50.0, 49.0) == 1000.0  # never before its start
    assert wall_after(1000.0, 50.0, 51.0, not_before=1500.0) == 1500.0  # nor before an earlier start
