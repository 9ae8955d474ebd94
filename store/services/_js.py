"""Small pieces of JavaScript semantics the context services need on top of ``store.format``.

Pi's context code reads parsed JSON with plain property access, ``.length``, ``+`` and
``Array.prototype.sort``; a hand-edited or odd session file makes those visible (a missing
``content`` throws, a number where a string was expected gives ``NaN``). The helpers here give
the same answers for the values ``js_parse`` returns, so the services can mirror Pi line by line
without scattering ``isinstance`` checks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from store.format.jsjson import js_number, js_stringify
from store.format.jsvalue import UNDEFINED, js_trim, map_key

NAN = float("nan")

__all__ = [
    "NAN",
    "JsSet",
    "content_text",
    "get",
    "is_nullish",
    "js_add",
    "js_ceil",
    "js_default_sort",
    "js_entries",
    "js_eq",
    "js_gt",
    "js_iterate",
    "js_length",
    "js_object_from_entries",
    "js_stringify_value",
    "js_to_number",
    "js_to_string",
    "js_values",
    "json_length",
    "jsonable",
    "utf16_len",
]


def is_nullish(value: Any) -> bool:
    """``value == null`` in JavaScript (null or undefined)."""
    return value is None or value is UNDEFINED


def get(value: Any, key: str) -> Any:
    """``value[key]`` as JavaScript evaluates it: TypeError on null/undefined, UNDEFINED when the
    key is absent or the value is a primitive without such a property (``.length`` of strings
    and arrays is their length)."""
    if type(value) is dict:
        return value.get(key, UNDEFINED)
    if value is None or value is UNDEFINED:
        shown = "null" if value is None else "undefined"
        raise TypeError(f"Cannot read properties of {shown} (reading '{key}')")
    if key == "length":
        if isinstance(value, str):
            return utf16_len(value)
        if isinstance(value, list):
            return len(value)
    if isinstance(value, dict):
        return value.get(key, UNDEFINED)
    return UNDEFINED


def js_eq(a: Any, b: Any) -> bool:
    """``a === b`` for parsed JSON values (objects by identity)."""
    if a is b:
        return not (isinstance(a, float) and a != a)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if isinstance(a, str):
        return isinstance(b, str) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        try:
            return float(a) == float(b)
        except OverflowError:
            return a == b
    return False


def utf16_len(text: str) -> int:
    """``text.length``: UTF-16 code units (a character beyond U+FFFF counts 2, a lone surrogate 1)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def js_length(value: Any) -> Any:
    """``value.length`` (TypeError on null/undefined; UNDEFINED when there is none)."""
    return get(value, "length")


def json_length(value: Any) -> int:
    """``JSON.stringify(value).length``; TypeError where JavaScript's result is ``undefined``."""
    if value is UNDEFINED:
        raise TypeError("Cannot read properties of undefined (reading 'length')")
    return utf16_len(js_stringify(jsonable(value)))


def js_stringify_value(value: Any) -> str:
    """``String(JSON.stringify(value))`` (``"undefined"`` for undefined)."""
    if value is UNDEFINED:
        return "undefined"
    return js_stringify(jsonable(value))


# what ``Number(text)`` reads, once trimmed (ASCII digits only; no sign before 0x / 0o / 0b)
_JS_NUMBER = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
                        r"|0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+")


def js_to_number(value: Any) -> float | int:
    if value is None or value is False:
        return 0
    if value is True:
        return 1
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        text = js_trim(value)
        if not text:
            return 0
        if not _JS_NUMBER.fullmatch(text):  # Python's float() also takes "1_0", "inf", "１２"
            return NAN
        return int(text, 0) if text[:2].lower() in ("0x", "0o", "0b") else float(text)
    if isinstance(value, list):
        return js_to_number(js_to_string(value))
    return NAN  # undefined, plain objects


def js_to_string(value: Any) -> str:
    """``String(value)`` for parsed JSON values."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if value is UNDEFINED:
        return "undefined"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, list):
        return ",".join("" if is_nullish(item) else js_to_string(item) for item in value)
    return "[object Object]"


def js_add(a: Any, b: Any) -> Any:
    """``a + b``: string concatenation when either side is (or converts to) a string, else numbers."""
    if isinstance(a, (str, list, dict)) or isinstance(b, (str, list, dict)):
        return js_to_string(a) + js_to_string(b)
    return js_to_number(a) + js_to_number(b)


def js_gt(a: Any, b: Any) -> bool:
    """``a > b`` for numbers (or values JavaScript converts to numbers)."""
    if isinstance(a, str) and isinstance(b, str):
        return a > b
    x, y = js_to_number(a), js_to_number(b)
    return x > y  # NaN compares false


def js_ceil(value: Any) -> Any:
    """``Math.ceil``: NaN and infinities pass through."""
    number = js_to_number(value)
    if isinstance(number, int):
        return number
    if math.isnan(number) or math.isinf(number):
        return number
    return math.ceil(number)


_INDEX_KEY = re.compile("0|[1-9][0-9]{0,9}")
_MAX_INDEX = 2**32 - 2


def _utf16_units(text: str) -> list[str]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [data[i:i + 2].decode("utf-16-le", "surrogatepass") for i in range(0, len(data), 2)]


def _ordered_keys(keys: Iterable[str]) -> list[str]:
    """Keys in JavaScript own-property order: array-index keys ascending, then insertion order."""
    indexed: list[tuple[int, str]] = []
    others: list[str] = []
    for key in keys:
        if _INDEX_KEY.fullmatch(key) and int(key) <= _MAX_INDEX:
            indexed.append((int(key), key))
        else:
            others.append(key)
    if not indexed:
        return others
    indexed.sort()
    return [key for _, key in indexed] + others


def js_entries(value: Any) -> list[tuple[str, Any]]:
    """``Object.entries(value)`` (TypeError on null/undefined)."""
    if isinstance(value, dict):
        return [(key, value[key]) for key in _ordered_keys(value)]
    if isinstance(value, list):
        return [(str(index), item) for index, item in enumerate(value)]
    if isinstance(value, str):
        return [(str(index), unit) for index, unit in enumerate(_utf16_units(value))]
    if value is None or value is UNDEFINED:
        raise TypeError("Cannot convert undefined or null to object")
    return []


def js_values(value: Any) -> list[Any]:
    """``Object.values(value)``."""
    return [item for _, item in js_entries(value)]


def js_object_from_entries(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """``Object.fromEntries``: a dict whose key order is JavaScript's property order."""
    collected: dict[str, Any] = {}
    for key, item in pairs:
        collected[key] = item
    return {key: collected[key] for key in _ordered_keys(collected)}


def js_iterate(value: Any) -> Iterator[Any]:
    """``for (const x of value)`` over a parsed JSON value: arrays, and strings by code point."""
    if isinstance(value, list):
        return iter(value)
    if isinstance(value, str):
        return iter(value)
    if value is None or value is UNDEFINED:
        raise TypeError(f"{js_to_string(value)} is not iterable")
    raise TypeError("object is not iterable")


def content_text(content: Any, separator: str = "\n") -> str:
    """pi-ai's ``contentText``: a string as is, else the text blocks' texts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TypeError("content.filter is not a function")
    parts = []
    for block in content:
        if js_eq(get(block, "type"), "text"):
            text = get(block, "text")
            parts.append("" if is_nullish(text) else js_to_string(text))
    return separator.join(parts)


def _sort_key(value: Any) -> bytes:
    return js_to_string(value).encode("utf-16-be", "surrogatepass")


def js_default_sort(values: Iterable[Any]) -> list[Any]:
    """``[...values].sort()``: by the UTF-16 code units of ``String(x)``, stable; undefined last."""
    items = list(values)
    defined = [item for item in items if item is not UNDEFINED]
    tail = [item for item in items if item is UNDEFINED]
    return sorted(defined, key=_sort_key) + tail


class JsSet:
    """A JavaScript ``Set`` of parsed JSON values: insertion order, SameValueZero membership."""

    __slots__ = ("_items",)

    def __init__(self, values: Iterable[Any] = ()) -> None:
        self._items: dict[tuple, Any] = {}
        for value in values:
            self.add(value)

    def add(self, value: Any) -> None:
        self._items.setdefault(map_key(value), value)

    def __contains__(self, value: Any) -> bool:
        return map_key(value) in self._items

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items.values()))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"JsSet({list(self._items.values())!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JsSet):
            return list(self._items) == list(other._items)
        if isinstance(other, (set, frozenset)):
            return set(self._items.values()) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def jsonable(value: Any) -> Any:
    """The value ``JSON.parse(JSON.stringify(value))`` would give back: keys holding undefined
    dropped, undefined in arrays and non-finite numbers become None (key order kept). Iterative:
    a value read from a file may be nested deeper than Python's stack."""
    top = _jsonable_copy(value)
    pending = [(value, top)] if _is_container(top) else []
    while pending:
        source, target = pending.pop()
        if type(source) is dict:
            for key, item in source.items():
                if item is not UNDEFINED:
                    target[key] = copy = _jsonable_copy(item)
                    if _is_container(copy):
                        pending.append((item, copy))
        else:
            for item in source:
                target.append(copy := _jsonable_copy(item))
                if _is_container(copy):
                    pending.append((item, copy))
    return top


def _is_container(value: Any) -> bool:
    return value.__class__ is dict or value.__class__ is list


def _jsonable_copy(value: Any) -> Any:
    """``jsonable`` of a scalar; an empty container to fill in for a dict, list or tuple."""
    kind = type(value)
    if kind is dict:
        return {}
    if kind is list or kind is tuple:
        return []
    if kind is float and (value != value or value in (math.inf, -math.inf)):
        return None
    if value is UNDEFINED:
        return None
    return value

