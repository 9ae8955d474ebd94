"""Typed views of session lines: the header, the entry types, messages and content blocks.

The models are for *reading*: field names are the JSON names (``parentId``, ``firstKeptEntryId``),
unknown fields are kept (``extra="allow"``), unknown entry types, roles and content blocks fall
back to ``UnknownEntry`` / ``UnknownMessage`` / ``UnknownContent``, and nothing is coerced
(strict mode: an int stays an int, ``1`` never becomes ``True``).  ``entry_to_dict`` gives back
the parsed object (same keys and values; key order may differ, so bytes are always written from
the original line or dict, never from a model).

Validation is as lenient as Pi: every field except the ``type``/``role`` tag may be absent
(absent and ``null`` stay distinguishable through ``model_fields_set``), ``content`` may be
null, entry timestamps may be numbers.  A known type whose fields hold the wrong JSON types
raises ``pydantic.ValidationError``.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Tag, TypeAdapter

__all__ = [
    "AgentMessage",
    "AssistantMessage",
    "BashExecutionMessage",
    "BranchSummaryEntry",
    "CompactionEntry",
    "ContentBlock",
    "ContextEditEntry",
    "ContextReplacement",
    "Cost",
    "CustomEntry",
    "CustomMessage",
    "CustomMessageEntry",
    "ImageContent",
    "LabelEntry",
    "MessageEntry",
    "ModelChangeEntry",
    "SessionEntry",
    "SessionHeader",
    "SessionInfoEntry",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ThinkingLevelChangeEntry",
    "ToolCall",
    "ToolResultMessage",
    "UnknownContent",
    "UnknownEntry",
    "UnknownMessage",
    "Usage",
    "UsageEntry",
    "UserMessage",
    "entry_to_dict",
    "parse_entry",
]

Number = int | float
Timestamp = str | int | float  # entries carry ISO strings, but Pi reads anything via new Date()


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


def _discriminator(field: str, models: dict[str, type[BaseModel]]) -> Discriminator:
    """Pick the model by the string in ``field``; anything else gets the "unknown" fallback."""
    tags = {model: tag for tag, model in models.items()}

    def tag_of(value: Any) -> str:
        if isinstance(value, BaseModel):  # serializing
            return tags.get(type(value), "unknown")
        tag = value.get(field) if isinstance(value, dict) else None
        return tag if isinstance(tag, str) and tag in models else "unknown"

    return Discriminator(tag_of)


# --- content blocks ----------------------------------------------------------------------------


class TextContent(_Model):
    type: Literal["text"]
    text: str | None = None
    textSignature: str | None = None


class ThinkingContent(_Model):
    type: Literal["thinking"]
    thinking: str | None = None
    thinkingSignature: str | None = None
    redacted: bool | None = None


class ToolCall(_Model):
    type: Literal["toolCall"]
    id: str | None = None
    name: str | None = None
    arguments: Any = None
    thoughtSignature: str | None = None
    namespace: str | None = None


class ImageContent(_Model):
    type: Literal["image"]
    data: str | None = None
    mimeType: str | None = None


class UnknownContent(_Model):
    """A content block of a type this code does not know; everything is kept as extra fields."""

    type: Any = None


ContentBlock = Annotated[
    Annotated[TextContent, Tag("text")]
    | Annotated[ThinkingContent, Tag("thinking")]
    | Annotated[ToolCall, Tag("toolCall")]
    | Annotated[ImageContent, Tag("image")]
    | Annotated[UnknownContent, Tag("unknown")],
    _discriminator(
        "type",
        {"text": TextContent, "thinking": ThinkingContent, "toolCall": ToolCall, "image": ImageContent},
    ),
]
Content = str | list[ContentBlock] | None


# --- messages ----------------------------------------------------------------------------------


class Cost(_Model):
    input: Number | None = None
    output: Number | None = None
    cacheRead: Number | None = None
    cacheWrite: Number | None = None
    total: Number | None = None


class Usage(_Model):
    input: Number | None = None
    output: Number | None = None
    cacheRead: Number | None = None
    cacheWrite: Number | None = None
    cacheWrite1h: Number | None = None
    reasoning: Number | None = None
    totalTokens: Number | None = None
    cost: Cost | None = None


class _Message(_Model):
    timestamp: Number | None = None  # Unix milliseconds


class UserMessage(_Message):
    role: Literal["user"]
    content: Content = None


class AssistantMessage(_Message):
    role: Literal["assistant"]
    content: Content = None
    api: str | None = None
    provider: str | None = None
    model: str | None = None
    responseModel: str | None = None
    responseId: str | None = None
    thinkingLevel: str | None = None
    usage: Usage | None = None
    stopReason: str | None = None
    errorMessage: str | None = None


class ToolResultMessage(_Message):
    role: Literal["toolResult"]
    toolCallId: str | None = None
    toolName: str | None = None
    content: Content = None
    details: Any = None
    usage: Usage | None = None
    nestedCalls: Any = None
    isError: bool | None = None


class SystemMessage(_Message):
    role: Literal["system"]
    content: Content = None
    sections: dict[str, str | None] | None = None  # a patch: null removes a section
    toolsAdded: list[Any] | None = None
    toolsRemoved: list[Any] | None = None


class BashExecutionMessage(_Message):
    role: Literal["bashExecution"]
    command: str | None = None
    output: str | None = None
    exitCode: Number | None = None
    cancelled: bool | None = None
    truncated: bool | None = None
    fullOutputPath: str | None = None
    excludeFromContext: bool | None = None


class CustomMessage(_Message):
    role: Literal["custom"]
    customType: str | None = None
    content: Content = None
    display: bool | None = None
    details: Any = None


class UnknownMessage(_Model):
    """A message with a role this code does not know (e.g. an unmigrated "hookMessage")."""

    role: Any = None


MESSAGE_MODELS: dict[str, type[BaseModel]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "toolResult": ToolResultMessage,
    "system": SystemMessage,
    "bashExecution": BashExecutionMessage,
    "custom": CustomMessage,
}
"""The known message roles and their models."""

AgentMessage = Annotated[
    Annotated[UserMessage, Tag("user")]
    | Annotated[AssistantMessage, Tag("assistant")]
    | Annotated[ToolResultMessage, Tag("toolResult")]
    | Annotated[SystemMessage, Tag("system")]
    | Annotated[BashExecutionMessage, Tag("bashExecution")]
    | Annotated[CustomMessage, Tag("custom")]
    | Annotated[UnknownMessage, Tag("unknown")],
    _discriminator("role", MESSAGE_MODELS),
]


# --- header and entries ------------------------------------------------------------------------


class SessionHeader(_Model):
    """Line 1 of a file (a later "session" line parses to this model too)."""

    type: Literal["session"]
    version: Any = None  # absent means 1; Pi compares it loosely ("2" counts as 2)
    id: str | None = None
    timestamp: Timestamp | None = None
    cwd: str | None = None
    parentSession: str | None = None


class _Entry(_Model):
    id: str | None = None
    parentId: str | None = None
    timestamp: Timestamp | None = None


class MessageEntry(_Entry):
    type: Literal["message"]
    message: AgentMessage | None = None


class ModelChangeEntry(_Entry):
    type: Literal["model_change"]
    provider: str | None = None
    modelId: str | None = None


class ThinkingLevelChangeEntry(_Entry):
    type: Literal["thinking_level_change"]
    thinkingLevel: str | None = None


class UsageEntry(_Entry):
    type: Literal["usage"]
    kind: str | None = None
    provider: str | None = None
    model: str | None = None
    usage: Usage | None = None
    note: str | None = None


class CompactionEntry(_Entry):
    """``firstKeptEntryIndex`` of unmigrated v1 files, if any, stays an extra field."""

    type: Literal["compaction"]
    summary: str | None = None
    firstKeptEntryId: str | None = None
    tokensBefore: Number | None = None
    details: Any = None
    usage: Usage | None = None
    fromHook: bool | None = None
    systemMessage: AgentMessage | None = None


class BranchSummaryEntry(_Entry):
    type: Literal["branch_summary"]
    fromId: str | None = None
    summary: str | None = None
    details: Any = None
    usage: Usage | None = None
    fromHook: bool | None = None


class CustomEntry(_Entry):
    type: Literal["custom"]
    customType: str | None = None
    data: Any = None


class CustomMessageEntry(_Entry):
    type: Literal["custom_message"]
    customType: str | None = None
    content: Content = None
    display: bool | None = None
    details: Any = None


class ContextReplacement(_Model):
    content: Content = None


class ContextEditEntry(_Entry):
    type: Literal["context_edit"]
    targetId: str | None = None
    replacement: ContextReplacement | None = None  # null: leave the target out of the context


class LabelEntry(_Entry):
    type: Literal["label"]
    targetId: str | None = None
    label: str | None = None  # absent or "" clears the label


class SessionInfoEntry(_Entry):
    type: Literal["session_info"]
    name: str | None = None


class UnknownEntry(_Model):
    """An entry of a type this code does not know; Pi keeps it in the tree all the same."""

    type: Any = None
    id: Any = None
    parentId: Any = None
    timestamp: Any = None


ENTRY_MODELS: dict[str, type[BaseModel]] = {
    "session": SessionHeader,
    "message": MessageEntry,
    "model_change": ModelChangeEntry,
    "thinking_level_change": ThinkingLevelChangeEntry,
    "usage": UsageEntry,
    "compaction": CompactionEntry,
    "branch_summary": BranchSummaryEntry,
    "custom": CustomEntry,
    "custom_message": CustomMessageEntry,
    "context_edit": ContextEditEntry,
    "label": LabelEntry,
    "session_info": SessionInfoEntry,
}
"""The header and the 11 entry types, by their ``type``."""

SessionEntry = Annotated[
    Annotated[SessionHeader, Tag("session")]
    | Annotated[MessageEntry, Tag("message")]
    | Annotated[ModelChangeEntry, Tag("model_change")]
    | Annotated[ThinkingLevelChangeEntry, Tag("thinking_level_change")]
    | Annotated[UsageEntry, Tag("usage")]
    | Annotated[CompactionEntry, Tag("compaction")]
    | Annotated[BranchSummaryEntry, Tag("branch_summary")]
    | Annotated[CustomEntry, Tag("custom")]
    | Annotated[CustomMessageEntry, Tag("custom_message")]
    | Annotated[ContextEditEntry, Tag("context_edit")]
    | Annotated[LabelEntry, Tag("label")]
    | Annotated[SessionInfoEntry, Tag("session_info")]
    | Annotated[UnknownEntry, Tag("unknown")],
    _discriminator("type", ENTRY_MODELS),
]
"""Any line object: the header type, the 11 entry types, or ``UnknownEntry``."""

_ENTRY_ADAPTER: TypeAdapter[SessionEntry] = TypeAdapter(SessionEntry)


def parse_entry(obj: dict[str, Any]) -> SessionEntry:
    """The typed model for one parsed line object (raises ``pydantic.ValidationError``)."""
    return _ENTRY_ADAPTER.validate_python(obj)


def entry_to_dict(model: BaseModel) -> dict[str, Any]:
    """The object ``model`` was parsed from: the same keys and values (order may differ)."""
    return model.model_dump(mode="python", exclude_unset=True)
