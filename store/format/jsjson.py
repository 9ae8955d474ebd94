"""JSON exactly as JavaScript's ``JSON.parse`` / ``JSON.stringify`` see it.

Pi writes every session line with ``JSON.stringify``; reproducing its files byte for byte needs
the same number formatting, string escaping and (surprisingly) key order.  ``js_parse`` returns
ordinary Python values: dicts keep the *source* key order (JavaScript would move integer-like
keys to the front; ``js_stringify`` does that when writing), integer literals become ``int``
(beyond 64 bits ``float``, which is the value JavaScript holds anyway), other numbers ``float``.
"""

import json
import math
import re
from collections.abc import Iterator
from json.decoder import scanstring
from json.encoder import encode_basestring
from typing import Any

import orjson

__all__ = ["JsonLineError", "js_number", "js_parse", "js_string", "js_stringify", "parse_deep"]


class JsonLineError(ValueError):
    """A line that ``JSON.parse`` would refuse; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# parsing


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _parse_int(digits: str) -> int | float:
    # Python refuses int() on more than 4300 digits; such a literal is Infinity in JavaScript.
    return int(digits) if len(digits) < 4000 else float(digits)


_STDLIB_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_parse_int)


def js_parse(text: str) -> Any:
    """Parse ``text`` with ``JSON.parse`` semantics; raise ``JsonLineError`` where it would throw.

    orjson does the work; the stdlib decoder is the fallback for the few inputs that orjson
    refuses and JavaScript accepts (lone surrogate escapes such as ``"\\ud800"``, numbers that
    overflow to Infinity, raw surrogates in a Python ``str``).  Duplicate keys: the last value
    wins and the key keeps its first position, as in JavaScript.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        error = exc
    try:
        return _STDLIB_DECODER.decode(text)
    except ValueError:
        pass
    except RecursionError:  # nested deeper than Python's stack: JSON.parse has no such limit
        try:
            return parse_deep(text)
        except JsonLineError as deep_error:
            raise deep_error from None
    raise JsonLineError(f"invalid JSON at column {error.colno}: {error.msg}")


_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace: exactly these four
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))


class _OpenObject:
    """An object being read by :func:`parse_deep`, and the key of its value being read."""

    __slots__ = ("key", "value")

    def __init__(self, value: dict, key: str) -> None:
        self.value, self.key = value, key


def parse_deep(text: str, duplicates: list[str] | None = None) -> Any:
    """``JSON.parse`` of ``text`` without recursion, for values nested deeper than orjson (1,024
    levels) or the stdlib (Python's stack) go; JavaScript's parser has no depth limit. Same values
    as :func:`js_parse`: integer literals as ``int``, other numbers ``float`` (``inf`` on overflow,
    as JavaScript's Infinity), lone surrogate escapes kept, duplicate keys last-wins at the first
    key's position (``duplicates`` collects them), ``__proto__`` an ordinary key.

    Raises ``JsonLineError`` naming the column (1-based) where ``JSON.parse`` would throw."""
    end = len(text)
    stack: list[list | _OpenObject] = []  # open containers, innermost last
    at = _WHITESPACE.match(text, 0).end()  # type: ignore[union-attr]

    def fail(reason: str, where: int) -> JsonLineError:
        return JsonLineError(f"invalid JSON at column {where + 1}: {reason}")

    def key_at(where: int) -> tuple[str, int]:
        if text.startswith('"', where):
            try:
                key, where = scanstring(text, where + 1, True)
            except ValueError as exc:
                raise fail(f"bad string ({exc.args[0].partition(':')[0]})", where) from None
            where = _WHITESPACE.match(text, where).end()  # type: ignore[union-attr]
            if text.startswith(":", where):
                return key, _WHITESPACE.match(text, where + 1).end()  # type: ignore[union-attr]
            raise fail("expected ':' after an object key", where)
        raise fail("expected a string as object key", where)

    while True:
        # one value starts at ``at``
        char = text[at:at + 1]
        if char == "{":
            at = _WHITESPACE.match(text, at + 1).end()  # type: ignore[union-attr]
            if not text.startswith("}", at):
                key, at = key_at(at)
                stack.append(_OpenObject({}, key))
                continue
            value: Any = {}
            at += 1
        elif char == "[":
            at = _WHITESPACE.match(text, at + 1).end()  # type: ignore[union-attr]
            if not text.startswith("]", at):
                stack.append([])
                continue
            value = []
            at += 1
        elif char == '"':
            try:
                value, at = scanstring(text, at + 1, True)
            except ValueError as exc:
                raise fail(f"bad string ({exc.args[0].partition(':')[0]})", at) from None
        elif number := _NUMBER.match(text, at):
            token = number.group()
            value = float(token) if number.group(1) or number.group(2) else _parse_int(token)
            at = number.end()
        else:
            for word, literal in _LITERALS:
                if text.startswith(word, at):
                    value, at = literal, at + len(word)
                    break
            else:
                raise fail("unexpected end of input" if at >= end else f"unexpected character {char!r}", at)
        # the value is complete: put it into the open containers, closing those that end here
        while True:
            at = _WHITESPACE.match(text, at).end()  # type: ignore[union-attr]
            if not stack:
                if at < end:
                    raise fail("unexpected data after the JSON value", at)
                return value
            top = stack[-1]
            char = text[at:at + 1]
            if top.__class__ is list:
                top.append(value)
                if char == "]":
                    value = stack.pop()
                    at += 1
                    continue
            else:
                container, key = top.value, top.key
                if duplicates is not None and key in container:
                    duplicates.append(key)
                container[key] = value
                if char == "}":
                    value = container
                    stack.pop()
                    at += 1
                    continue
                if char == ",":
                    top.key, at = key_at(_WHITESPACE.match(text, at + 1).end())  # type: ignore[union-attr]
                    break
            if char != ",":
                closer = "]" if top.__class__ is list else "}"
                raise fail(f"expected ',' or '{closer}'" if at < end else "unexpected end of input", at)
            at = _WHITESPACE.match(text, at + 1).end()  # type: ignore[union-attr]
            break


# ---------------------------------------------------------------------------------------------
# numbers

_MAX_SAFE = 2**53


def _float_to_js(x: float) -> str:
    """Number::toString for a finite float outside the fast cases of ``js_number``."""
    text = repr(x)  # shortest round-trip digits, like JavaScript
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)  # decimal point after `point` digits
    significant = digits.lstrip("0")
    point -= len(digits) - len(significant)
    digits = significant.rstrip("0")
    count = len(digits)
    if count <= point <= 21:
        return sign + digits + "0" * (point - count)
    if 0 < point <= 21:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -6 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    power = point - 1
    exp_text = f"e+{power}" if power >= 0 else f"e{power}"
    if count == 1:
        return sign + digits + exp_text
    return f"{sign}{digits[0]}.{digits[1:]}{exp_text}"


def js_number(x: int | float) -> str:
    """JavaScript's ``Number.prototype.toString()`` (= ``String(x)``) for ``x`` seen as a double.

    Non-finite values give ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (``js_stringify`` writes
    them as ``null``, as ``JSON.stringify`` does).  Integers beyond 2**53 are first rounded to the
    nearest double, as a JavaScript number literal would be.
    """
    if isinstance(x, int):
        if -_MAX_SAFE <= x <= _MAX_SAFE:
            return str(x)
        try:
            x = float(x)
        except OverflowError:
            return "Infinity" if x > 0 else "-Infinity"
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    if x.is_integer():
        if -_MAX_SAFE <= x <= _MAX_SAFE:
            return str(int(x))  # also turns -0.0 into "0"
    elif 1e-4 <= abs(x) < 1e16:
        return repr(x)  # Python and JavaScript agree on non-integral fixed notation here
    return _float_to_js(x)


def js_string(value: Any) -> str:
    """``String(value)`` for a JSON value, as JavaScript's implicit conversions see it.

    Arrays join their elements with "," (null inside an array is empty), objects are
    ``"[object Object]"``, numbers use ``js_number``.
    """
    if not isinstance(value, (list, tuple)):
        return _scalar_string(value)
    # arrays within arrays are joined with a stack of our own: a file can nest them far deeper
    # than Python's recursion limit (Node 22 joins ~3,100 levels, then throws a RangeError)
    stack: list[tuple[Iterator[Any], list[str]]] = [(iter(value), [])]
    while True:
        items, parts = stack[-1]
        for item in items:
            if isinstance(item, (list, tuple)):
                stack.append((iter(item), []))
                break
            parts.append("" if item is None else _scalar_string(item))
        else:
            joined = ",".join(parts)
            stack.pop()
            if not stack:
                return joined
            stack[-1][1].append(joined)


def _scalar_string(value: Any) -> str:
    """``String(value)`` for a JSON value that is not an array."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, str):
        return value
    return "[object Object]"


# ---------------------------------------------------------------------------------------------
# stringify

_SURROGATES = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")
_INDEX_KEY = re.compile("0|[1-9][0-9]{0,9}")
_MAX_INDEX = 2**32 - 2  # the largest array index; JavaScript orders those keys first


def _fix_surrogate(match: re.Match[str]) -> str:
    text = match.group()
    if len(text) == 2:  # a pair is one character to JavaScript, written raw
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    return f"\\u{ord(text):04x}"


def _js_key_order(obj: dict[Any, Any]) -> list[Any]:
    """Keys in JavaScript property order: array-index keys ascending, then insertion order."""
    indexed: list[tuple[int, str]] = []
    others: list[Any] = []
    for key in obj:
        if type(key) is str and _INDEX_KEY.fullmatch(key) and int(key) <= _MAX_INDEX:
            indexed.append((int(key), key))
        else:
            others.append(key)
    if not indexed:
        return others
    indexed.sort()
    return [key for _, key in indexed] + others


class _Token(str):
    """JSON text already written (brackets, separators, keys), queued among values by ``_encode``."""

    __slots__ = ()


class _Close:
    """The closing bracket of a container, queued by ``_encode``: writing it leaves the container."""

    __slots__ = ("bracket", "container")

    def __init__(self, bracket: str, container: int) -> None:
        self.bracket, self.container = bracket, container


def _encode(value: Any, out: list[str], indent: str = "") -> None:
    """Append the JSON text of ``value`` to ``out`` (the slow, fully general path), each member on
    its own line indented by ``indent`` per level when it is given (``JSON.stringify``'s third
    argument). Iterative: ``JSON.parse`` accepts any depth, so a stored value may be nested deeper
    than Python's stack."""
    pending: list[Any] = [value]  # values and tokens still to write, the next one last
    open_containers: set[int] = set()  # ids of the containers being written (a cycle would never end)
    while pending:
        value = pending.pop()
        kind = type(value)
        if kind is _Close:
            out.append(value.bracket)
            open_containers.discard(value.container)
        elif kind is _Token or kind is str:
            out.append(value if kind is _Token else encode_basestring(value))
        elif kind is dict:
            if not value:
                out.append("{}")
                continue
            inner, outer, colon = _layout(indent, len(open_containers))
            _enter(open_containers, value)
            keys = _js_key_order(value)
            pending.append(_Close(outer + "}", id(value)))
            for index in range(len(keys) - 1, -1, -1):
                key = keys[index]
                if not isinstance(key, str):
                    raise TypeError(f"dict keys must be str, not {type(key).__name__}")
                pending.append(value[key])
                pending.append(_Token(f"{',' if index else '{'}{inner}{encode_basestring(key)}{colon}"))
        elif kind is list or kind is tuple:
            if not value:
                out.append("[]")
                continue
            inner, outer, _ = _layout(indent, len(open_containers))
            _enter(open_containers, value)
            pending.append(_Close(outer + "]", id(value)))
            for index in range(len(value) - 1, -1, -1):
                pending.append(value[index])
                pending.append(_Token(("," if index else "[") + inner))
        elif value is None:
            out.append("null")
        elif value is True:
            out.append("true")
        elif value is False:
            out.append("false")
        elif kind is int or kind is float:
            text = js_number(value)
            out.append(text if text[-1].isdigit() else "null")  # NaN, Infinity, -Infinity
        elif isinstance(value, (str, int, float, dict, list, tuple)):
            pending.append(_plain(value))
        else:
            raise TypeError(f"{kind.__name__} is not JSON serializable")


def _layout(indent: str, depth: int) -> tuple[str, str, str]:
    """What goes before a member, before the closing bracket, and after a key, at ``depth``."""
    if not indent:
        return "", "", ":"
    return "\n" + indent * (depth + 1), "\n" + indent * depth, ": "


def _enter(open_containers: set[int], container: Any) -> None:
    if id(container) in open_containers:
        raise ValueError("circular reference: JSON.stringify throws on a cyclic structure")
    open_containers.add(id(container))


def _plain(value: Any) -> Any:
    """The built-in value behind an instance of a subclass of str/int/float/dict/list/tuple."""
    if isinstance(value, str):
        return str.__str__(value)  # str() would call an overridden __str__ (e.g. on enums)
    for base in (int, float, dict, list):
        if isinstance(value, base):
            return base(value)
    return list(value)


# orjson writes what JSON.stringify writes except for: floats that are integral ("1.0", "-0.0")
# or in exponent form ("3e-6", "1e+21"), integers beyond 2**53 (refused with OPT_STRICT_INTEGER),
# objects with array-index keys (kept in insertion order) and lone surrogates (refused).  The
# hints are cheap scans (a regex costs little when its first character is a rare literal) for
# those spots; they may also fire on look-alikes inside strings, which costs time, never
# correctness.  Only when a float hint fires do the exact (slower) token patterns run.
_INDEX_KEY_HINT = re.compile(rb'"\d+":')
_FLOAT_HINTS = (re.compile(rb"\.0[,}\]]"), re.compile(rb"e[-+]\d+[,}\]]"))
_FLOAT_TOKENS = tuple(
    re.compile(re.escape(sep) + rb"-?\d+(?:(?:\.\d+)?e[-+]\d+|\.0)(?=[,}\]])") for sep in (b":", b",", b"[")
)


def _js_float_token(match: re.Match[bytes]) -> bytes:
    separator, token = match[0][:1], match[0][1:]
    return separator + js_number(float(token)).encode()


def _via_orjson(value: dict[str, Any] | list[Any]) -> str | None:
    """The fast path: orjson's output with its few differences fixed, or None to go slow."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)
    except TypeError:  # surrogates, big ints, non-str keys, foreign types
        return None
    if _INDEX_KEY_HINT.search(data) and not _keys_in_js_order(value):
        return None
    if not (_FLOAT_HINTS[0].search(data) or _FLOAT_HINTS[1].search(data)):
        return data.decode()
    fixed = data
    for pattern in _FLOAT_TOKENS:
        fixed = pattern.sub(_js_float_token, fixed)
    # Rewriting a look-alike inside a string changes that string; NaN (written as null) and
    # tuples also compare unequal.  All of those take the slow path.
    if fixed != data and orjson.loads(fixed) != value:
        return None
    return fixed.decode()


def _keys_in_js_order(value: dict[str, Any] | list[Any]) -> bool:
    """Whether every object in ``value`` already has its keys in JavaScript property order
    (array-index keys first, ascending), so that orjson's insertion order is JSON.stringify's.
    A walk over the containers only: far cheaper than the reference encoder."""
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if any(type(key) is str and key[:1].isdigit() for key in item) and _js_key_order(item) != list(item):
                return False
            pending.extend(child for child in item.values() if isinstance(child, (dict, list, tuple)))
        else:
            pending.extend(child for child in item if isinstance(child, (dict, list, tuple)))
    return True


def js_stringify(value: Any, indent: int = 0) -> str:
    """``JSON.stringify(value)`` for a JSON-like Python value (dict, list, tuple, str, int,
    float, bool, None; subclasses count as their base type); ``indent``: ``JSON.stringify(value,
    null, indent)``, for people to read.

    No whitespace (unless indented); array-index keys first in ascending order, then insertion
    order; strings escaped like JavaScript (lone surrogates as ``\\udxxx``, everything else
    non-ASCII raw); numbers as ``js_number``, non-finite ones as ``null``.  Non-str dict keys
    raise TypeError.
    """
    if not indent and (type(value) is dict or type(value) is list):
        text = _via_orjson(value)
        if text is not None:
            return text
    out: list[str] = []
    _encode(value, out, " " * min(indent, 10))
    text = "".join(out)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub(_fix_surrogate, text)
    return text
