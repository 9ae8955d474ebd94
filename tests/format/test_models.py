"""Typed models: every real entry validates and dumps back to the object it came from."""

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from store.format.jsjson import JsonLineError, js_parse
from store.format.models import (
    AssistantMessage,
    BashExecutionMessage,
    CompactionEntry,
    ContextEditEntry,
    CustomMessage,
    CustomMessageEntry,
    ImageContent,
    LabelEntry,
    MessageEntry,
    SessionHeader,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UnknownContent,
    UnknownEntry,
    UnknownMessage,
    UserMessage,
    entry_to_dict,
    parse_entry,
)
from tests.oracle_support import SHARED

SAMPLES = SHARED / "oracle" / "samples"
CORPUS = SHARED / "corpus" / "pi-sessions"


def _files() -> list[Path]:
    return [
        *sorted((SAMPLES / "sessions").glob("*.jsonl")),
        *sorted((SAMPLES / "legacy").glob("*.jsonl")),
        *sorted(CORPUS.glob("*.jsonl")),
    ]


def _objects(path: Path) -> list[dict[str, Any]]:
    objects = []
    for raw in path.read_bytes().split(b"\n"):
        try:
            value = js_parse(raw.decode("utf-8", "replace"))
        except JsonLineError:
            continue
        if isinstance(value, dict):
            objects.append(value)
    return objects


def test_shared_files_are_present() -> None:
    if not SAMPLES.exists() or not CORPUS.exists():
        pytest.skip(f"shared test data not found under {SHARED}")
    assert len(_files()) >= 6 + 27 + 26


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.name)
def test_every_entry_validates_and_round_trips(path: Path) -> None:
    for obj in _objects(path):
        model = parse_entry(obj)
        assert entry_to_dict(model) == obj
        if obj.get("type") == "message" and isinstance(obj.get("message"), dict):
            assert isinstance(model, MessageEntry)


def test_typed_access() -> None:
    entry = parse_entry(
        {
            "type": "message",
            "id": "a1b2c3d4",
            "parentId": None,
            "timestamp": "2025-01-01T00:00:00.000Z",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "hi", "textSignature": "s"},
                    {"type": "thinking", "thinking": "", "redacted": True},
                    {
                        "type": "toolCall",
                        "id": "c1",
                        "name": "read",
                        "arguments": {"path": "a"},
                        "partialJson": "{",
                    },
                    {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                    {"type": "server_tool_use", "x": 1},
                ],
                "api": "anthropic-messages",
                "provider": "anthropic",
                "model": "m",
                "usage": {"input": 1, "output": 2, "totalTokens": 3, "cost": {"total": 0.5}},
                "stopReason": "stop",
                "timestamp": 1,
            },
        }
    )
    assert isinstance(entry, MessageEntry)
    assert entry.parentId is None and "parentId" in entry.model_fields_set
    message = entry.message
    assert isinstance(message, AssistantMessage)
    assert message.usage is not None and message.usage.cost is not None and message.usage.cost.total == 0.5
    assert isinstance(message.content, list)
    assert [type(block) for block in message.content] == [
        TextContent,
        ThinkingContent,
        ToolCall,
        ImageContent,
        UnknownContent,
    ]
    tool_call = message.content[2]
    assert isinstance(tool_call, ToolCall)
    assert tool_call.arguments == {"path": "a"}
    assert tool_call.model_extra == {"partialJson": "{"}


@pytest.mark.parametrize(
    ("message", "model"),
    [
        ({"role": "user", "content": "x"}, UserMessage),
        ({"role": "user", "content": None}, UserMessage),
        ({"role": "assistant", "content": []}, AssistantMessage),  # no usage at all
        ({"role": "toolResult", "toolCallId": "c", "content": "s", "isError": False}, ToolResultMessage),
        ({"role": "system", "content": "", "sections": {"10": "a", "b": None}}, SystemMessage),
        ({"role": "bashExecution", "command": "ls", "output": "", "exitCode": 0}, BashExecutionMessage),
        ({"role": "custom", "customType": "t", "content": [], "display": False}, CustomMessage),
        ({"role": "hookMessage", "customType": "t"}, UnknownMessage),
        ({"role": "branchSummary", "summary": "s"}, UnknownMessage),
        ({"content": "no role"}, UnknownMessage),
        ({"role": 7}, UnknownMessage),
    ],
)
def test_message_roles(message: dict[str, Any], model: type) -> None:
    obj = {"type": "message", "id": "x", "message": message}
    entry = parse_entry(obj)
    assert isinstance(entry, MessageEntry)
    assert type(entry.message) is model
    assert entry_to_dict(entry) == obj


@pytest.mark.parametrize(
    ("obj", "model"),
    [
        ({"type": "session", "version": "2", "id": "s", "cwd": "/"}, SessionHeader),
        ({"type": "session"}, SessionHeader),
        ({"type": "label", "id": "l", "targetId": "t"}, LabelEntry),  # label absent: a clear
        ({"type": "context_edit", "targetId": "t", "replacement": None}, ContextEditEntry),
        ({"type": "context_edit", "targetId": "t", "replacement": {"content": "x"}}, ContextEditEntry),
        ({"type": "custom_message", "content": None, "display": True, "timestamp": 5}, CustomMessageEntry),
        ({"type": "compaction", "firstKeptEntryIndex": "6", "tokensBefore": 1.0}, CompactionEntry),
        (
            {"type": "compaction", "systemMessage": {"role": "system", "content": "p", "toolsAdded": []}},
            CompactionEntry,
        ),
        ({"type": "future_entry", "id": 1, "secret": "kept"}, UnknownEntry),
        ({"type": "leaf", "targetId": "x"}, UnknownEntry),
        ({"type": None}, UnknownEntry),
        ({}, UnknownEntry),
    ],
)
def test_entry_types(obj: dict[str, Any], model: type) -> None:
    entry = parse_entry(obj)
    assert type(entry) is model
    assert entry_to_dict(entry) == obj


def test_values_are_not_coerced() -> None:
    obj = {"type": "compaction", "tokensBefore": 1.0, "fromHook": False, "details": {"n": 1}}
    dumped = entry_to_dict(parse_entry(obj))
    assert type(dumped["tokensBefore"]) is float
    with pytest.raises(ValidationError):
        parse_entry({"type": "compaction", "fromHook": 1})  # never turned into True
    with pytest.raises(ValidationError):
        parse_entry({"type": "label", "targetId": 5})  # never turned into "5"


def test_unknown_and_odd_keys_survive() -> None:
    obj = {
        "type": "message",
        "id": "x",
        "message": {"role": "user", "content": "c", "newField": [1], "__proto__": {"a": 1}},
        "__proto__": None,
        "10": "integer-like key",
        "model_config": "not a pydantic attribute here",
    }
    assert entry_to_dict(parse_entry(obj)) == obj
