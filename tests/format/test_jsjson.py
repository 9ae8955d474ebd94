"""js_parse / js_stringify / js_number / js_string against JavaScript's JSON and Number."""

import enum
import json
import math
import random
from collections import OrderedDict
from pathlib import Path

import pytest

from store.format.jsjson import JsonLineError, js_number, js_parse, js_string, js_stringify
from tests.oracle_support import SHARED

ORACLE_SAMPLES = SHARED / "oracle" / "samples"
CORPUS = SHARED / "corpus" / "pi-sessions"


def _pi_written_files() -> list[Path]:
    """Files written line by line by Pi's own JSON.stringify."""
    return [
        *sorted((ORACLE_SAMPLES / "sessions").glob("*.jsonl")),
        *sorted(CORPUS.glob("v3-real-*.jsonl")),
        *sorted(CORPUS.glob("v3-harness-*.jsonl")),
    ]


def _describe_contents() -> list[tuple[str, str]]:
    """(name, file text) of every file Pi rewrote with JSON.stringify under describe.mjs: the
    migrated files and the header Pi writes into an empty file (not files where Pi only
    appended a missing final newline)."""
    found = []
    for path in sorted((ORACLE_SAMPLES / "describe").glob("*.json")):
        content = (json.loads(path.read_text("utf-8")).get("fileAfterOpen") or {}).get("content")
        original = ORACLE_SAMPLES / "legacy" / f"{path.stem}.jsonl"
        if content and original.exists() and content != original.read_bytes().decode("utf-8") + "\n":
            found.append((path.stem, content))
    return found


def _needs(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"shared test data not found: {path}")


# --- round trip over everything Pi wrote --------------------------------------------------------


@pytest.mark.parametrize("path", _pi_written_files(), ids=lambda p: p.name)
def test_round_trip_of_pi_written_lines(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # Pi ends every line with "\n"
    for number, raw in enumerate(lines[:-1], 1):
        line = raw.decode("utf-8")
        assert js_stringify(js_parse(line)) == line, f"{path.name}:{number}"


def test_pi_written_files_are_present() -> None:
    _needs(ORACLE_SAMPLES / "sessions")
    _needs(CORPUS)
    assert len(_pi_written_files()) >= 6 + 11 + 2


@pytest.mark.parametrize("content", [pytest.param(c, id=n) for n, c in _describe_contents()])
def test_round_trip_of_files_pi_rewrote(content: str) -> None:
    # Pi's rewrite after migration normalizes number literals and key order; re-stringifying
    # its output must be the identity.
    for line in content.split("\n")[:-1]:
        assert js_stringify(js_parse(line)) == line


def test_describe_samples_are_present() -> None:
    _needs(ORACLE_SAMPLES / "describe" / "legacy-v1.json")
    names = dict(_describe_contents())
    assert {"legacy-v1", "legacy-v1-compaction-edges", "legacy-v2-hookmessage", "edge-empty"} <= set(names)


# --- js_parse ------------------------------------------------------------------------------------


def test_parse_keeps_ints_and_floats_apart() -> None:
    parsed = js_parse('{"a":1,"b":1.0,"c":-0,"d":1E2,"e":6.0E-4}')
    assert parsed == {"a": 1, "b": 1.0, "c": 0, "d": 100.0, "e": 6e-4}
    values = js_parse("[1,1.0,1e2,-0.0]")
    assert [type(v) for v in values] == [int, float, float, float]
    assert math.copysign(1, values[3]) == -1


def test_parse_duplicate_keys_last_value_first_position() -> None:
    parsed = js_parse('{"a":1,"b":2,"a":3}')
    assert parsed == {"a": 3, "b": 2}
    assert list(parsed) == ["a", "b"]
    assert js_stringify(parsed) == '{"a":3,"b":2}'  # what JSON.stringify(JSON.parse(...)) gives


def test_parse_lone_surrogate_escapes_like_json_parse() -> None:
    assert js_parse('"\\ud800x"') == "\ud800x"
    assert js_parse('{"k":"\\udfff"}') == {"k": "\udfff"}
    assert js_parse('"\\ud83d\\ude00"') == "\U0001f600"  # a valid pair is one character


def test_parse_numbers_beyond_double_range() -> None:
    assert js_parse("1e400") == math.inf  # JavaScript: Infinity
    assert js_parse("[-1e400]") == [-math.inf]
    assert js_parse("123456789012345678901234567890") == 1.2345678901234568e29
    assert js_parse('["\\ud800",' + "9" * 5000 + "]") == ["\ud800", math.inf]


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "Infinity",
        "-Infinity",
        '{"a":NaN}',
        "[Infinity]",
        '"\\ud800" NaN',
        "\ufeff{}",  # a BOM is not JSON whitespace
        "{} x",
        "{}{}",
        '"a\x01b"',  # raw control character inside a string
        '"a\nb"',
        "[1,]",
        "{'a':1}",
        "01",
        "1.",
        ".5",
        "+1",
        "",
        "   ",
        '"\\x41"',
        "tru",
        '"\\ud800',
    ],
)
def test_parse_rejects_what_json_parse_rejects(text: str) -> None:
    with pytest.raises(JsonLineError) as info:
        js_parse(text)
    assert info.value.reason.startswith("invalid JSON at column ")
    assert isinstance(info.value, ValueError)


def test_parse_accepts_json_whitespace_and_crlf() -> None:
    assert js_parse(' \t{"a":[1]}\r') == {"a": [1]}
    assert js_parse("null") is None
    assert js_parse('"\u2028\u2029\x7f"') == "\u2028\u2029\x7f"


def test_parse_error_names_the_column() -> None:
    with pytest.raises(JsonLineError, match=r"^invalid JSON at column 7: .*comma"):
        js_parse('{"a":1,}')


# --- js_number: golden values from Node 22 (String(Number(x))) -------------------------------------

# Computed once with the oracle's node (V8) and pasted here; the tests need no JavaScript.
FLOAT_GOLDEN = [
    (0.0, "0"),
    (-0.0, "0"),
    (1.0, "1"),
    (-1.0, "-1"),
    (1.5, "1.5"),
    (0.1, "0.1"),
    (0.30000000000000004, "0.30000000000000004"),
    (0.3333333333333333, "0.3333333333333333"),
    (-0.6666666666666666, "-0.6666666666666666"),
    (100.0, "100"),
    (1e20, "100000000000000000000"),
    (1e21, "1e+21"),
    (-1e21, "-1e+21"),
    (1.5e21, "1.5e+21"),
    (1.2345678901234568e20, "123456789012345680000"),
    (1e16, "10000000000000000"),
    (1000000000000000.5, "1000000000000000.5"),
    (9007199254740992.0, "9007199254740992"),
    (9007199254740994.0, "9007199254740994"),
    (1.152921504606847e18, "1152921504606847000"),
    (1e-06, "0.000001"),
    (1e-07, "1e-7"),
    (-1e-07, "-1e-7"),
    (1.5e-07, "1.5e-7"),
    (1.234e-06, "0.000001234"),
    (3e-06, "0.000003"),
    (1e-05, "0.00001"),
    (0.00015, "0.00015"),
    (5e-324, "5e-324"),
    (2.2250738585072014e-308, "2.2250738585072014e-308"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (1e100, "1e+100"),
    (1.23e-18, "1.23e-18"),
    (0.0006, "0.0006"),
    (4.35, "4.35"),
    (0.0001, "0.0001"),
    (12345.678, "12345.678"),
    (1e301, "1e+301"),
    (9.999999999999999e20, "999999999999999900000"),
    (1.0000000000000002, "1.0000000000000002"),
]

INT_GOLDEN = [
    (0, "0"),
    (-1, "-1"),
    (2147483648, "2147483648"),
    (4294967296, "4294967296"),
    (9007199254740991, "9007199254740991"),
    (9007199254740992, "9007199254740992"),
    (9007199254740993, "9007199254740992"),
    (9007199254740994, "9007199254740994"),
    (-9007199254740993, "-9007199254740992"),
    (12345678901234567890, "12345678901234567000"),
    (18446744073709551616, "18446744073709552000"),
    (10**21, "1e+21"),
    (10**22, "1e+22"),
    (-(10**25), "-1e+25"),
    (2**1024 - 1, "Infinity"),
    (-(10**400), "-Infinity"),
]


@pytest.mark.parametrize(("value", "expected"), FLOAT_GOLDEN + INT_GOLDEN)
def test_js_number_golden(value: int | float, expected: str) -> None:
    assert js_number(value) == expected
    stringified = "null" if expected.endswith("Infinity") else expected
    assert js_stringify(value) == stringified
    assert js_stringify([value]) == f"[{stringified}]"
    assert js_stringify({"k": value}) == f'{{"k":{stringified}}}'


def test_js_number_non_finite() -> None:
    assert js_number(math.nan) == "NaN"
    assert js_number(math.inf) == "Infinity"
    assert js_number(-math.inf) == "-Infinity"
    assert js_stringify([math.nan, math.inf, -math.inf]) == "[null,null,null]"


def test_js_number_round_trips_random_doubles() -> None:
    rng = random.Random(20240601)
    for _ in range(20000):
        x = rng.choice([rng.uniform(-1e6, 1e6), rng.random() * 10 ** rng.randint(-330, 308)])
        text = js_number(x)
        assert float(text) == x
        assert "e" not in text or text.split("e")[1][0] in "+-"
        assert ("e" in text) == (x != 0 and not 1e-6 <= abs(x) < 1e21)


# --- js_stringify --------------------------------------------------------------------------------


def test_stringify_basic_values() -> None:
    assert js_stringify(None) == "null"
    assert js_stringify(True) == "true"
    assert js_stringify(False) == "false"
    assert js_stringify("") == '""'
    assert js_stringify([]) == "[]"
    assert js_stringify({}) == "{}"
    assert js_stringify((1, (2, 3))) == "[1,[2,3]]"
    assert js_stringify({"a": [1, {"b": None}], "c": "d"}) == '{"a":[1,{"b":null}],"c":"d"}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"\\', '"\\"\\\\"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x00\x01\x1b\x1f", '"\\u0000\\u0001\\u001b\\u001f"'),
        ("\x7f\x80\xa0", '"\x7f\x80\xa0"'),
        ("\u2028\u2029\ufeff\uffff", '"\u2028\u2029\ufeff\uffff"'),
        ("/<>&'", '"/<>&\'"'),
        ("日本語 👩‍💻 שלום é", '"日本語 👩‍💻 שלום é"'),
        ("\ud800", '"\\ud800"'),
        ("a\udfffb", '"a\\udfffb"'),
        ("\udc00\ud800", '"\\udc00\\ud800"'),  # reversed: two lone surrogates
        ("\ud83d\ude00", '"\U0001f600"'),  # a high+low pair is one character to JavaScript
        ("\ud83d\ud83d\ude00", '"\\ud83d\U0001f600"'),
    ],
)
def test_stringify_escapes_strings_like_javascript(text: str, expected: str) -> None:
    assert js_stringify(text) == expected
    assert js_stringify([text]) == f"[{expected}]"
    assert js_stringify({text: text}) == f"{{{expected}:{expected}}}"


def test_stringify_orders_array_index_keys_first() -> None:
    obj = {"b": 1, "10": 2, "2": 3, "01": 4, "-1": 5, "1.5": 6, "4294967294": 7}
    obj |= {"4294967295": 8, "0": 9, "a": 10}
    expected = '{"0":9,"2":3,"10":2,"4294967294":7,"b":1,"01":4,"-1":5,"1.5":6,"4294967295":8,"a":10}'
    assert js_stringify(obj) == expected
    assert js_stringify({"x": [obj]}) == f'{{"x":[{expected}]}}'
    assert js_stringify({"٣": 1, "1": 2}) == '{"1":2,"٣":1}'  # only ASCII digits count
    assert js_stringify({"__proto__": {"0": 1}, "x": 2}) == '{"__proto__":{"0":1},"x":2}'


def test_stringify_index_keys_in_order_or_not_inside_big_documents() -> None:
    """Index keys already first and ascending (inspect's prepareCompaction) keep the fast path's
    output; one object out of order deep inside still gets JavaScript's order."""
    messages = [{"role": "user", "content": [{"type": "text", "text": f"line {n}", "n": n}]} for n in range(300)]
    ordered = {"prepareCompaction": {"0": None, "50": {"tokensBefore": 1.0}, "20000": []}, "messages": messages}
    expected = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).replace(":1.0}", ":1}")
    assert js_stringify(ordered) == expected
    messages[150]["content"][0]["meta"] = {"b": 1, "7": 2}
    assert '"meta":{"7":2,"b":1}' in js_stringify(ordered)
    assert js_stringify([{"x": {"2": 1, "10": 2}}]) == '[{"x":{"2":1,"10":2}}]'


def test_stringify_rejects_non_string_keys_and_foreign_types() -> None:
    with pytest.raises(TypeError):
        js_stringify({1: "a"})
    with pytest.raises(TypeError):
        js_stringify([{"a": {None: 1}}])
    with pytest.raises(TypeError):
        js_stringify({"a": object()})
    with pytest.raises(TypeError):
        js_stringify({1, 2})


def test_stringify_subclasses_as_their_base_type() -> None:
    class Loud(str):
        def __str__(self) -> str:
            return "LOUD"

    class Level(enum.IntEnum):
        HIGH = 3

    value = OrderedDict([("c", Loud("red")), ("l", Level.HIGH), ("f", 1e21)])
    assert js_stringify(value) == '{"c":"red","l":3,"f":1e+21}'
    slow = {"c": Loud("red"), "l": [Level.HIGH], "s": "\ud800"}  # the surrogate forces the slow path
    assert js_stringify(slow) == '{"c":"red","l":[3],"s":"\\ud800"}'
    assert js_stringify(Loud("x")) == '"x"'


def test_stringify_look_alikes_inside_strings_stay_untouched() -> None:
    # Text that looks like a float token the fast path would rewrite.
    tricky = ["a:1.0,b", "x[1e+21]", ",2.0}", ":3e-6]", '"5":', "[-0.0,"]
    for text in tricky:
        quoted = json.dumps(text, ensure_ascii=False)
        assert js_stringify({"t": text, "n": 1.0}) == f'{{"t":{quoted},"n":1}}'
        assert js_stringify([text, 3e-6]) == f"[{quoted},0.000003]"


def test_stringify_random_structures_match_the_reference_encoder() -> None:
    # Every value is checked twice: inside containers (orjson fast path when possible) and as
    # a top-level scalar (always the reference encoder).
    rng = random.Random(7)
    atoms = [
        0,
        1,
        -1,
        2**53,
        2**53 + 1,
        2**64,
        1.0,
        -0.0,
        0.5,
        3e-6,
        1e-7,
        1e21,
        1e20,
        math.nan,
        math.inf,
        True,
        False,
        None,
        "",
        "x",
        "1.0,",
        ":1e+21]",
        "\ud800",
        "\x00",
        "\u2028",
        "é",
    ]
    keys = ["a", "b", "0", "2", "10", "01", "__proto__", "k:1.0", ""]

    def build(depth: int) -> object:
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(atoms)
        if rng.random() < 0.5:
            return [build(depth - 1) for _ in range(rng.randint(0, 4))]
        return {rng.choice(keys): build(depth - 1) for _ in range(rng.randint(0, 4))}

    def reference(value: object) -> str:
        if isinstance(value, list):
            return "[" + ",".join(reference(v) for v in value) + "]"
        if isinstance(value, dict):
            ordered = sorted((k for k in value if k.isdigit() and (k == "0" or k[0] != "0")), key=int)
            ordered += [k for k in value if k not in ordered]
            return "{" + ",".join(f"{js_stringify(k)}:{reference(value[k])}" for k in ordered) + "}"
        return js_stringify(value)

    for _ in range(3000):
        value = build(4)
        assert js_stringify(value) == reference(value)


# --- js_string -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (True, "true"),
        (1.0, "1"),
        (1e21, "1e+21"),
        ("s", "s"),
        ([], ""),
        ([None], ""),
        ([1, [2, [3]], None, "x"], "1,2,3,,x"),
        ({}, "[object Object]"),
        ([{}], "[object Object]"),
    ],
)
def test_js_string(value: object, expected: str) -> None:
    assert js_string(value) == expected


def test_stringify_indented_like_json_stringify_with_indent() -> None:
    """``js_stringify(v, indent=2)`` is ``JSON.stringify(v, null, 2)`` (pasted from node)."""
    value = {"b": [1, {}, [], {"x": 1e21, "y": "\udc80 é", "z": [[None, True]]}], "1": -0.5, "e": "", "o": {"k": {}}}
    expected = ("{\n  \"1\": -0.5,\n  \"b\": [\n    1,\n    {},\n    [],\n    {\n      \"x\": 1e+21,\n      \"y\": "
                "\"\\udc80 é\",\n      \"z\": [\n        [\n          null,\n          true\n        ]\n"
                "      ]\n    }\n  ],\n  \"e\": \"\",\n  \"o\": {\n    \"k\": {}\n  }\n}")
    assert js_stringify(value, indent=2) == expected
    assert js_stringify(value, indent=0) == js_stringify(value) == "".join(
        line.strip().replace('": ', '":') for line in expected.splitlines())
