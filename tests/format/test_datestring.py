"""Date strings as V8 reads them (store.format.datestring), against Node's own answers.

The golden file tests/fixtures/dates/v8_date_strings.json holds 6,000 strings drawn by
tools/date_differential.py (seed 20261207) with ``new Date(text).getTime()`` as the oracle's Node
printed it (TZ=UTC); the table below holds hand-picked cases, printed by the same Node.  The live
test draws fresh strings and asks that Node again; it skips when the oracle is not installed.
"""

import json
from pathlib import Path

import pytest

from store.format.datestring import read_date_string
from store.format.jsdate import _ISO, _iso_time, fields_time, parse_iso_date, parse_js_date
from tests.oracle_support import ORACLE_NODE, ORACLE_SKIP_REASON, oracle_available
from tools.date_differential import date_strings, node_times

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "dates" / "v8_date_strings.json"

# `new Date(text).getTime()` in the oracle's Node 22 with TZ=UTC (None: NaN).
FALLBACK_GOLDEN = [
    ("Sat, 01 Feb 2025 09:00:00 GMT", 1738400400000),
    ("Sat Feb 01 2025 09:00:00 GMT+0000 (Coordinated Universal Time)", 1738400400000),
    ("Feb 1 2025", 1738368000000),
    ("Feb 1", 980985600000),  # the year defaults to 2001
    ("2/3", 981158400000),
    ("2025/02/01", 1738368000000),
    ("2025/02/01 09:00:00", 1738400400000),
    ("2025-2-1", 1738368000000),
    ("12345", 327403382400000),
    ("1 Jan 99", 915148800000),
    ("1 Jan 49", 2493072000000),
    ("Jan 1 2025 9:00 PM", 1735765200000),
    ("Jan 1 2025 12:00 am", 1735689600000),
    ("Jan 1 2025 13:00 pm", None),
    ("Feb 1 2025 11:00 PM EST", 1738468800000),
    ("Feb 1 2025 10:00 GMT+1:30", 1738398600000),
    ("Feb 1 2025 10:00 GMT-0800", 1738432800000),
    ("Feb 1 2025 10:00 UTC+596523:", -409078800000),  # 2,147,482,800 s: just inside V8's limit
    ("Feb 1 2025 10:00 UTC+1193046:", None),
    ("Feb 1 2025 10:00 GMT+12345", None),
    ("-000000-01-01", 978307200000),  # not an ISO year: the sign and the zeros are dropped
    ("-0000004001-01", 64092211200000),
    ("0000004001", 64092211200000),  # leading zeros do not count among a numeral's nine digits
    ("2025-01-01T10:00:00.0123456789012Z", 1735725600123),
    ("2025-01-01T24:00:00.0000000000001Z", None),
    ("2025-01-01T24:00:00.000000000Z", 1735776000000),
    ("Jan 1 2025\u00a010:00", 1735725600000),  # Unicode spaces separate
    ("Jan 1 2025 10:00\u2028", None),  # line separators are word characters
    ("Jan 1 2025 10:00 ut\u00a0", 1735725600000),
    ("Jan 1 2025 10:00 ut\u3000x", None),
    ("2025-02-01\x00garbage", 1738368000000),  # a NUL ends the text
    ("(comment) Feb 1 2025 (more (nested)) 10:00", 1738404000000),
    ("Feb 1 2025 10:00)", None),
    ("Tuesday Feb 1 2025", 1738368000000),
    ("x1 Feb 2025", None),
    ("Feb 30 2025", 1740873600000),
    ("Feb 32 2025", None),
    ("Feb 1 2025 10:00:00:00", 1738404000000),
    ("Feb 1 2025 10::", 1738404000000),
    ("10:00 Feb 1 2025 10:00", None),
    ("2025-02-01 10:00.5", None),
    ("2025-02-01T10:00:00 GMT", None),
    ("2025-02 x", None),
    ("Dec 31 275760", None),
    ("Sep 13 275760 00:00 GMT+1", 8639999996400000),
    ("T10:00", None),
    ("2025\u65e51\u6708", None),
]


@pytest.mark.parametrize(("text", "expected"), FALLBACK_GOLDEN, ids=repr)
def test_fallback_forms_match_v8(text: str, expected: int | None) -> None:
    assert parse_js_date(text) == expected


def _golden_cases() -> list[tuple[str, int | None]]:
    document = json.loads(GOLDEN.read_text("utf-8"))
    return [(text, time) for text, time in document["cases"]]


def test_six_thousand_drawn_strings_match_node() -> None:
    cases = _golden_cases()
    assert len(cases) == 6000 and sum(time is not None for _, time in cases) > 1000
    wrong = [(text, time, parse_js_date(text)) for text, time in cases if parse_js_date(text) != time]
    assert wrong == []


def test_the_drawn_strings_are_the_generators() -> None:
    """The golden file still holds what the tool draws (so a campaign's seed means the same)."""
    assert [text for text, _ in _golden_cases()] == date_strings("20261207", 6000)


def test_the_iso_shortcut_agrees_with_the_whole_reader() -> None:
    """Strings the fast ISO pattern takes give the same time through V8's whole reader."""
    texts = [text for text, _ in _golden_cases()] + [text for text, _ in FALLBACK_GOLDEN] + [
        "2025-02-01T09:00:00.000Z", "2025-02-01t09:00:00.123456789+05:30", "+275760-09-13T00:00Z",
        "-271821-04-20", "2025-02-01T24:00", "2025-02-01T24:00:00.5Z", "2025-02-01T25:00", "0000T00:00-2359",
    ]
    checked = 0
    for text in texts:
        match = _ISO.fullmatch(text)
        if match is None:
            continue
        fields = read_date_string(text)
        assert _iso_time(match) == (None if fields is None else fields_time(fields)), text
        checked += 1
    assert checked >= 8


def test_a_date_in_arrays_nested_past_pythons_recursion_limit() -> None:
    """``new Date([[...["Feb 1 2025"]...]])`` joins the arrays: Node 22 does so 3,000 levels
    deep (it throws a RangeError by 4,000); here no depth raises (a RecursionError did at 333)."""
    value: object = "Feb 1 2025"
    for _ in range(3000):
        value = [value]
    assert parse_js_date(value) == 1738368000000
    for _ in range(100_000):
        value = [value, "x"]  # "Feb 1 2025,x,x,...": a word after a number
    assert parse_js_date(value) is None


def test_a_typed_date_is_iso_only() -> None:
    assert parse_iso_date("2026-01-31") == 1769817600000
    assert parse_iso_date("2026-01-31 09:00") == parse_iso_date("2026-01-31T09:00Z") == 1769850000000
    for text in ("5", "Feb 1 2025", "2/3", "-000000-01-01", "2026-01-31 09", "yesterday"):
        assert parse_iso_date(text) is None, text
    assert parse_js_date("5") == 988675200000  # what new Date would make of the first


@pytest.mark.oracle
@pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)
def test_fresh_strings_match_the_live_node() -> None:
    strings = date_strings("live", 3000)
    expected = node_times(ORACLE_NODE, strings)
    pairs = zip(strings, expected, strict=True)
    wrong = [(text, time, parse_js_date(text)) for text, time in pairs if parse_js_date(text) != time]
    assert wrong == []
