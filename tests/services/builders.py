"""Hand-built session paths for the service tests (entries shaped as Pi writes them)."""

from __future__ import annotations

from typing import Any

from store.format.jsdate import js_iso

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class PathBuilder:
    """Appends entries to one root→leaf path; ids e0001, e0002, ...; 1 s apart."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.clock = BASE_MS

    def _next(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.clock += 1000
        entry = {
            "type": kind,
            "id": f"e{len(self.entries) + 1:04d}",
            "parentId": self.entries[-1]["id"] if self.entries else None,
            "timestamp": js_iso(self.clock),
            **fields,
        }
        self.entries.append(entry)
        return entry

    def now_iso(self) -> str:
        return js_iso(self.clock)

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        return self._next("message", message={**message, "timestamp": self.clock + 1000})

    def system(self, content: Any, **fields: Any) -> dict[str, Any]:
        return self.message({"role": "system", "content": content, **fields})

    def user(self, text: str) -> dict[str, Any]:
        return self.message({"role": "user", "content": text})

    def assistant(self, text: str | None = None, *, tool_calls: list[tuple[str, str, dict]] = (),
                  usage_total: int | None = None) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if text is not None:
            content.append({"type": "text", "text": text})
        for call_id, name, arguments in tool_calls:
            content.append({"type": "toolCall", "id": call_id, "name": name, "arguments": arguments})
        message: dict[str, Any] = {
            "role": "assistant", "content": content, "api": "openai-completions", "provider": "local",
            "model": "test-model", "stopReason": "toolUse" if tool_calls else "stop",
        }
        if usage_total is not None:
            cost = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
            message["usage"] = {"input": usage_total - 10, "output": 10, "cacheRead": 0, "cacheWrite": 0,
                                "totalTokens": usage_total, "cost": cost}
        return self.message(message)

    def tool_result(self, call_id: str, name: str, text: str) -> dict[str, Any]:
        return self.message({"role": "toolResult", "toolCallId": call_id, "toolName": name,
                             "content": [{"type": "text", "text": text}], "isError": False})

    def context_edit(self, target_id: str, replacement: Any) -> dict[str, Any]:
        return self._next("context_edit", targetId=target_id, replacement=replacement)

    def model_change(self, provider: str, model_id: str) -> dict[str, Any]:
        return self._next("model_change", provider=provider, modelId=model_id)

    def label(self, target_id: str, label: str) -> dict[str, Any]:
        return self._next("label", targetId=target_id, label=label)

    def append(self, entry: dict[str, Any]) -> dict[str, Any]:
        self.entries.append(entry)
        return entry

    def next_id(self) -> str:
        return f"e{len(self.entries) + 1:04d}"

    def tick(self) -> str:
        self.clock += 1000
        return js_iso(self.clock)


def tool(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
