"""Values nested deeper than orjson (1,024 levels) or Python's stack go: ``JSON.parse`` reads
them, so the store parses, writes back and walks them without recursion."""

from __future__ import annotations

import json

import pytest

from store.analysis.extract import FACTS_MAX_DEPTH, analysis_values
from store.format import JsonLineError, js_parse, js_stringify
from store.format.jsjson import parse_deep
from store.services import jsonable

SHALLOW = [
    "{}", "[]", '""', "0", "-0", "-0.0", "1e400", "-1e400", "12345678901234567890", "5e-324", "true", "null",
    ' { "a" : [ 1 , 2.5 , { } , [ ] ] , "b" : "\\u00e9\\n\\ud800" } ',
    '{"a":1,"b":2,"a":3}', '{"__proto__":{"x":1},"2":0,"10":1}', '["\\ud83d\\ude00", "\\udc00x"]',
]
REJECTED = ["", " ", "[", "[1,]", '{"a"}', '{"a":1,}', "[1 2]", "01", "[1]x", "tru", "{,}", '"\\x"', '"a\tb"',
            "NaN", "[-]", '{"a":1', "[1e]", '"abc', "\ufeff1", "[1]\u00a0"]


def _depth(value: object) -> int:
    depth = 0
    while isinstance(value, (list, dict)):
        value = value[0] if isinstance(value, list) else next(iter(value.values()))
        depth += 1
    return depth


@pytest.mark.parametrize("text", SHALLOW)
def test_parse_deep_gives_what_js_parse_gives(text: str) -> None:
    assert js_stringify(parse_deep(text)) == js_stringify(js_parse(text))
    assert repr(parse_deep(text)) == repr(js_parse(text))  # same types: int stays int, -0.0 stays float


@pytest.mark.parametrize("text", REJECTED)
def test_parse_deep_refuses_what_json_parse_refuses(text: str) -> None:
    with pytest.raises(JsonLineError, match=r"invalid JSON at column \d+"):
        parse_deep(text)


def test_duplicate_keys_last_wins_at_the_first_position() -> None:
    found: list[str] = []
    assert list(parse_deep('{"a":1,"b":{"c":2,"c":3},"a":4}', found).items()) == [("a", 4), ("b", {"c": 3})]
    assert found == ["c", "a"]


@pytest.mark.parametrize("depth", [1_100, 100_000])
def test_js_parse_reads_any_depth_and_stringify_writes_it_back(depth: int) -> None:
    arrays = "[" * depth + '"\\ud800"' + "]" * depth
    objects = '{"k":' * depth + "1.5" + "}" * depth
    for text in (arrays, objects, f'{{"a":{arrays},"b":{objects}}}'):
        value = js_parse(text)
        assert js_stringify(value) == text
    assert _depth(js_parse(arrays)) == depth
    with pytest.raises(JsonLineError):  # deep and broken: still an error, not a RecursionError
        js_parse("[" * depth + "]" * (depth - 1))


def test_deep_values_are_walked_without_recursion() -> None:
    depth = 5_000
    arguments = {"cmd": "ls", "deep": js_parse("[" * depth + "7" + "]" * depth)}
    assert _depth(jsonable(arguments)["deep"]) == depth
    message = {"role": "assistant", "content": [{"type": "toolCall", "id": "t", "name": "bash",
                                                 "arguments": arguments}]}
    search_text, facts = analysis_values({"type": "message", "message": message})[:2]
    assert search_text.split("\n") == ["", "bash", "ls", "7"]
    stored = json.loads(facts)["toolCalls"][0]["arguments"]
    assert stored == js_stringify(arguments)  # deeper than FACTS_MAX_DEPTH: kept as its JSON text
    shallow = {"deep": js_parse("[" * (FACTS_MAX_DEPTH - 1) + "]" * (FACTS_MAX_DEPTH - 1))}  # the limit, in all
    message["content"][0]["arguments"] = shallow
    assert json.loads(analysis_values({"type": "message", "message": message})[1])["toolCalls"][0][
        "arguments"] == shallow


def test_stringify_refuses_a_cycle_and_writes_shared_values_each_time() -> None:
    cyclic: dict = {"k": [1.5]}
    cyclic["k"].append(cyclic)  # JSON.stringify throws on it; the iterative writer must not loop forever
    with pytest.raises(ValueError, match="circular reference"):
        js_stringify(cyclic)
    shared = [1.5]  # not a cycle: written wherever it occurs
    assert js_stringify({"a": shared, "b": [shared, shared]}) == '{"a":[1.5],"b":[[1.5],[1.5]]}'
