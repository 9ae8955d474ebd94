"""What the analysis surface needs from one entry, computed once when the row is written.

:func:`analysis_values` is a pure function of an entry's parsed JSON; ``store.db.writes.entry_values``
appends its result to every ``entries`` row (imports and appends alike), so the SQL views read
typed columns and clean JSON instead of parsing ``line`` — which PostgreSQL cannot even parse
when a line holds a lone-surrogate or ``\\u0000`` escape (both legal in Pi's files). Every string
stored here is *clean*: lone surrogates and NUL become U+FFFD, on both engines alike.

The columns (``ANALYSIS_COLUMNS``, in row order) are never NULL: a row without the thing holds
``''`` / ``0`` / ``'{}'`` (the views show NULL). Measured on the append path: Python's sqlite3
binds ``None`` through its adapter protocol at ~3,600 instructions a parameter against ~350 for
an int or a str, and a SQLite trigger costs every inserted row, so there are neither.

``search_text``
    the entry's searchable text: its plain text first, then a newline and what else is worth
    finding (thinking, tool-call names and argument values, error messages, system-prompt
    sections); at most ``SEARCH_TEXT_LIMIT`` characters (on SQLite the index catch-up later keeps
    a long text that is one string of the line in the line alone: ``store.analysis.fts``).
    Plain text is the text blocks of a message (images, thinking and tool calls left out), a
    bash execution's command and output, a summary, a custom message's content, a context
    edit's replacement, a label, a session name.
``facts``
    a small JSON object of per-type fields: ``textChars`` (length of the plain text, when it is
    not all of ``search_text``), ``stopReason``, ``errorMessage``, ``totalTokens``, ``toolCalls``
    (``[{id, name, arguments}]``), ``toolCallId``, ``toolName``, ``isError``, ``exitCode``,
    ``kind``, ``firstKeptEntryId``, ``tokensBefore``, ``fromHook``, ``fromId``, ``customType``,
    ``display``, ``hides``, ``providerId``/``modelId`` (model changes), ``thinkingLevel``.
    Flags are 0/1.
``provider``, ``model``
    who was billed for this row's usage (assistant messages, ``usage`` entries).
``has_usage``, ``usage_*``
    1 on exactly the records Pi's ``/session`` adds up (assistant messages, tool results with
    usage, ``usage`` entries, compaction and branch-summary usage), with their token counts and
    ``cost.total`` (the reported ``totalTokens`` is in ``facts``). Counts that are not integers
    and costs that are not finite numbers, or not below 1e300 in magnitude, count as 0 (Pi would
    add them and print nonsense; PostgreSQL's sum of doubles fails where the total overflows).
"""

from __future__ import annotations

import math
from typing import Any, Final

import orjson

from store.db.stored_text import clean_text, db_text
from store.format.jsjson import js_number, js_stringify
from store.format.jsvalue import truthy

ANALYSIS_COLUMNS: Final = (
    "search_text", "facts", "provider", "model", "has_usage",
    "usage_input", "usage_output", "usage_cache_read", "usage_cache_write", "usage_cost",
)
SEARCH_TEXT_LIMIT: Final = 65_536
KEEP_ONCE_MIN_CHARS: Final = 128  # shorter texts stay in search_text (see text_path)
FACTS_MAX_DEPTH: Final = 200  # levels of a JSON value kept as JSON in ``facts`` (below orjson's 255)
_NO_USAGE: Final = (0, 0, 0, 0, 0, 0.0)  # has_usage, then the numbers
NO_ANALYSIS: Final = ("", "{}", "", "", *_NO_USAGE)
_MAX_BIGINT: Final = 2**63 - 1
_MAX_COST: Final = 1e300  # a cost at or beyond this counts as 0: no sum of costs can overflow a double
def analysis_values(value: dict) -> tuple:
    """The ``ANALYSIS_COLUMNS`` of one entry (a parsed JSON object of kind ``entry``)."""
    kind = value.get("type")
    if kind == "message":
        message = value.get("message")
        if message.__class__ is not dict:
            return NO_ANALYSIS
        content = message.get("content")
        role = message.get("role")
        if role == "user" and content.__class__ is str and len(content) <= SEARCH_TEXT_LIMIT:  # the most common
            if not content.isascii() or "\x00" in content:
                content = clean_text(content)
            return content, "{}", "", "", 0, 0, 0, 0, 0, 0.0
        if role == "assistant":
            return _assistant(message, content)
        return _message(role, message, content)
    facts: dict[str, Any] = {}
    if kind in ("compaction", "branch_summary"):
        if kind == "compaction":
            _put_id(facts, "firstKeptEntryId", value.get("firstKeptEntryId"))
            _put_tokens(facts, "tokensBefore", value.get("tokensBefore"))
        else:
            _put_id(facts, "fromId", value.get("fromId"))
        _put_flag(facts, "fromHook", value.get("fromHook"))
        usage = value.get("usage")
        return _row(_str(value.get("summary")), (), facts, usage=_usage(usage, facts) if truthy(usage) else _NO_USAGE)
    if kind == "usage":
        _put_str(facts, "kind", value.get("kind"))
        return _row("", (), facts, _str(value.get("provider")), _str(value.get("model")),
                    _usage(value.get("usage"), facts))
    if kind == "custom_message":
        _put_str(facts, "customType", value.get("customType"))
        _put_flag(facts, "display", value.get("display"))
        return _row(_content_text(value.get("content")), (), facts)
    if kind == "context_edit":
        replacement = value.get("replacement")
        text = _content_text(replacement.get("content")) if isinstance(replacement, dict) else ""
        return _row(text, (), {"hides": int(replacement is None)})
    if kind == "label":
        return _row(_str(value.get("label")), (), facts)
    if kind == "session_info":
        return _row(_str(value.get("name")), (), facts)
    if kind == "model_change":
        _put_str(facts, "providerId", value.get("provider"))
        _put_str(facts, "modelId", value.get("modelId"))
    elif kind == "thinking_level_change":
        _put_str(facts, "thinkingLevel", value.get("thinkingLevel"))
    elif kind == "custom":
        _put_str(facts, "customType", value.get("customType"))
    else:
        return NO_ANALYSIS
    return _row("", (), facts)


def _message(role: Any, message: dict, content: Any) -> tuple:
    facts: dict[str, Any] = {}
    if role == "toolResult":
        _put_str(facts, "toolCallId", message.get("toolCallId"))
        _put_str(facts, "toolName", message.get("toolName"))
        _put_flag(facts, "isError", message.get("isError"))
        usage = message.get("usage")
        return _row(_content_text(content), (), facts, usage=_usage(usage, facts) if truthy(usage) else _NO_USAGE)
    if role == "bashExecution":
        _put_number(facts, "exitCode", message.get("exitCode"))
        parts = [part for part in (_str(message.get("command")), _str(message.get("output"))) if part]
        return _row("\n".join(parts), (), facts)
    if role == "system":
        sections = message.get("sections")
        extra = [v for v in sections.values() if isinstance(v, str)] if isinstance(sections, dict) else ()
        return _row(_content_text(content), extra, facts)
    if role in ("branchSummary", "compactionSummary"):
        return _row(_str(message.get("summary")), (), facts)
    return _row(_content_text(content), (), facts)


def _assistant(message: dict, content: Any) -> tuple:
    # written for speed: this runs for every assistant message appended or imported
    texts: list[str] = []
    extra: list[str] = []
    calls: list[dict[str, Any]] = []
    if content.__class__ is list:
        for block in content:
            if block.__class__ is not dict:
                continue
            block_type = block.get("type")
            if block_type == "text":
                if (text := block.get("text")).__class__ is str:
                    texts.append(text)
            elif block_type == "thinking":
                if (thinking := block.get("thinking")).__class__ is str:
                    extra.append(thinking)
            elif block_type == "toolCall":
                call: dict[str, Any] = {}
                _put_str(call, "id", block.get("id"))
                _put_str(call, "name", block.get("name"))
                arguments = block.get("arguments")
                call["arguments"] = _clean_json(arguments)
                calls.append(call)
                if "name" in call:
                    extra.append(call["name"])
                _leaves(arguments, extra)
    elif content.__class__ is str:
        texts.append(content)
    facts: dict[str, Any] = {}
    if (stop := message.get("stopReason")).__class__ is str:
        facts["stopReason"] = clean_text(stop)
    if (error := message.get("errorMessage")).__class__ is str:
        facts["errorMessage"] = clean_text(error)
        extra.append(error)
    if calls:
        facts["toolCalls"] = calls
    text = texts[0] if len(texts) == 1 else "\n".join(texts)
    provider, model = message.get("provider"), message.get("model")
    return _row(text, extra, facts, provider if provider.__class__ is str else "",
                model if model.__class__ is str else "", _usage(message.get("usage"), facts))


def _row(text: str, extra: Any, facts: dict, provider: str = "", model: str = "", usage: tuple = _NO_USAGE) -> tuple:
    search = "\n".join([text, *extra]) if extra else text
    if len(search) > SEARCH_TEXT_LIMIT:
        search = search[:SEARCH_TEXT_LIMIT]
    if len(search) != len(text):
        facts["textChars"] = len(text)
    return (clean_text(search), orjson.dumps(facts).decode() if facts else "{}",
            clean_text(provider) if provider else "", clean_text(model) if model else "", *usage)


def _content_text(content: Any) -> str:
    """Text of a string or of the ``text`` blocks of a content array (joined by newlines)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        block["text"] for block in content
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )


def _leaves(value: Any, out: list[str]) -> None:
    """Append the string and number leaves of a JSON value (tool arguments) to ``out``, in
    document order (without recursion: JSON.parse accepts any depth)."""
    stack = [value]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            stack.extend(reversed(value.values()))
        elif isinstance(value, list):
            stack.extend(reversed(value))
        elif _is_number(value):
            out.append(js_number(value))  # as the number reads in the JSON line: 1.0 is "1", 1e-7 "1e-7"


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` holds containers more than ``limit`` levels deep."""
    stack = [(value, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, (dict, list)):
            if level > limit:
                return True
            stack.extend((item, level + 1) for item in (value.values() if isinstance(value, dict) else value))
    return False


def _clean_json(value: Any) -> Any:
    """A JSON value with every string (keys included) made storable, and integers beyond 64 bits
    as the doubles JavaScript holds (orjson writes no others). A value nested deeper than
    ``FACTS_MAX_DEPTH`` levels (orjson writes 255 at most, Python recurses 1,000 levels) becomes
    its JSON text, a string."""
    if isinstance(value, (dict, list)) and _nested_deeper(value, FACTS_MAX_DEPTH):
        return clean_text(js_stringify(value))
    return _clean_shallow(value)


def _clean_shallow(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_shallow(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_shallow(v) for v in value]
    if value.__class__ is int and not -_MAX_BIGINT - 1 <= value <= 2 * _MAX_BIGINT + 1:
        return float(value)
    return value


def _usage(usage: Any, facts: dict) -> tuple:
    """``has_usage`` and the numbers Pi's ``/session`` adds (token counts, ``cost.total``); the
    reported ``totalTokens`` goes to ``facts``."""
    if usage.__class__ is not dict:
        return _NO_USAGE
    get = usage.get
    _put_tokens(facts, "totalTokens", get("totalTokens"))
    cost = get("cost")
    total = cost.get("total") if cost.__class__ is dict else None
    if total.__class__ is not float and total.__class__ is not int:
        total = 0.0
    return (1, _tokens(get("input")), _tokens(get("output")), _tokens(get("cacheRead")), _tokens(get("cacheWrite")),
            float(total) if -_MAX_COST < total < _MAX_COST else 0.0)


def _tokens(value: Any) -> int:
    """An integral count that fits a BIGINT, else 0."""
    if value.__class__ is int:
        return value if -_MAX_BIGINT <= value <= _MAX_BIGINT else 0
    if value.__class__ is float and value.is_integer() and abs(value) <= _MAX_BIGINT:
        return int(value)
    return 0


def _put_tokens(facts: dict, key: str, value: Any) -> None:
    if _is_number(value):
        facts[key] = _tokens(value)


def _is_number(value: Any) -> bool:
    return value.__class__ is int or value.__class__ is float


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _put_str(facts: dict, key: str, value: Any) -> None:
    if isinstance(value, str):
        facts[key] = clean_text(value)


def _put_id(facts: dict, key: str, value: Any) -> None:
    """An entry id, in the form ``entries.entry_id`` holds it (``db_text``), so that they join."""
    if isinstance(value, str):
        facts[key] = db_text(value)


def _put_number(facts: dict, key: str, value: Any) -> None:
    if _is_number(value) and math.isfinite(value):
        facts[key] = _clean_json(value)


def _put_flag(facts: dict, key: str, value: Any) -> None:
    if isinstance(value, bool):
        facts[key] = int(value)


def text_path(value: dict, search_text: str) -> str | None:
    """Where in the entry's JSON the whole of its ``search_text`` is one string (a JSON path such as
    ``$.message.content[0].text``), for a text of at least ``KEEP_ONCE_MIN_CHARS`` characters; else
    None. SQLite keeps such a text in ``line`` alone (migration 0010): its insert statement compares
    the string SQLite reads there with the text before it leaves the text out of ``search_text``
    (``store.db.writes.insert_sql``), so this is a proposal, checked exactly. The two facts it adds
    (``textAt``, ``textChars``) cost ~50 bytes: shorter texts would not pay (measured on the
    Pi-written file: 0.81 MB saved from 128 characters on, 0.35 MB from 256 on)."""
    if len(search_text) < KEEP_ONCE_MIN_CHARS:
        return None
    kind = value.get("type")
    if kind == "message":
        message = value.get("message")
        if message.__class__ is not dict:
            return None
        if message.get("role") in ("branchSummary", "compactionSummary"):
            return "$.message.summary" if message.get("summary") == search_text else None
        return _content_path(message.get("content"), "$.message.content", search_text)
    if kind in ("compaction", "branch_summary"):
        return "$.summary" if value.get("summary") == search_text else None
    if kind == "custom_message":
        return _content_path(value.get("content"), "$.content", search_text)
    if kind == "label":
        return "$.label" if value.get("label") == search_text else None
    if kind == "session_info":
        return "$.name" if value.get("name") == search_text else None
    return None


def _content_path(content: Any, base: str, search_text: str) -> str | None:
    """The path of the string or text block of ``content`` that is all of ``search_text``."""
    if content.__class__ is str:
        return base if content == search_text else None
    if content.__class__ is list:
        for index, block in enumerate(content):
            if block.__class__ is dict and block.get("type") == "text" and block.get("text") == search_text:
                return f"{base}[{index}].text"
    return None
