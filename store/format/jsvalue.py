"""JavaScript value semantics that Pi's code relies on when it reads parsed JSON.

Pi reads entries with plain property access (``entry.id``, ``entry.parentId``) and truthiness
tests (``if (entry.label)``); these helpers give the same answers for the Python values that
``js_parse`` returns, so a missing key (``undefined``) stays distinct from ``null``.
"""

from __future__ import annotations

import math
from typing import Any, Final


class _Undefined:
    """JavaScript's ``undefined``: what reading a missing property gives."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"

    def __bool__(self) -> bool:
        return False


UNDEFINED: Final = _Undefined()

# ECMAScript WhiteSpace + LineTerminator: what String.prototype.trim removes (U+FEFF included).
JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def prop(value: Any, key: str) -> Any:
    """``value[key]`` as JS reads it from parsed JSON: UNDEFINED when absent or not an object."""
    if isinstance(value, dict):
        return value.get(key, UNDEFINED)
    return UNDEFINED


def truthy(value: Any) -> bool:
    """JavaScript truthiness for parsed JSON values (UNDEFINED, null, false, 0, NaN, "" are falsy)."""
    if value is None or value is UNDEFINED or value is False:
        return False
    if isinstance(value, (int, float)):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


def js_trim(text: str) -> str:
    """``String.prototype.trim``."""
    return text.strip(JS_WHITESPACE)


def map_key(value: Any) -> tuple:
    """A hashable key with JS ``Map`` (SameValueZero) identity for parsed JSON values."""
    if value is UNDEFINED:
        return ("undefined",)
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, (int, float)):
        return ("number", js_double(value))
    if isinstance(value, str):
        return ("string", value)
    return ("object", id(value))


def js_double(value: int | float) -> float:
    """The JavaScript number a parsed JSON number is (integers beyond a double's range: ±Infinity)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
