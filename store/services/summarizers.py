"""Summarizers: what compaction and branch summaries call to turn a transcript into a summary.

A :class:`Summarizer` answers one request (a system prompt, one user prompt holding the
serialised conversation and instructions, and an output cap) with a :class:`SummaryResponse`.
It reports failures in the response (``stop_reason`` "error"/"length"/"aborted", ``has_tool_call``)
instead of raising; the compaction code decides that such a response is never stored.

* :class:`DeterministicSummarizer` — for tests: a reproducible summary built from the input,
  configurable to fail in each way, and it records every request it saw.
* :class:`OpenAICompatibleSummarizer` — any OpenAI-compatible ``/v1/chat/completions``
  endpoint (llama.cpp's server, vLLM, hosted APIs), over ``httpx``. Requests carry no prompt
  caching parameters: a one-off summary should not write a cache entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx

__all__ = [
    "DeterministicSummarizer",
    "OpenAICompatibleSummarizer",
    "Summarizer",
    "SummaryRequest",
    "SummaryResponse",
    "empty_usage",
    "make_usage",
]

ENV_BASE_URL = "PI_STORE_SUMMARY_BASE_URL"
ENV_MODEL = "PI_STORE_SUMMARY_MODEL"
ENV_API_KEY = "PI_STORE_SUMMARY_API_KEY"


def make_usage(input_tokens: int = 0, output_tokens: int = 0, cache_read: int = 0,
               cache_write: int = 0, total_tokens: int | None = None) -> dict[str, Any]:
    """A usage record in Pi's shape (``{input, output, cacheRead, cacheWrite, totalTokens,
    cost: {...}}``); costs are 0 (we do not price local models)."""
    total = input_tokens + output_tokens + cache_read + cache_write if total_tokens is None else total_tokens
    return {
        "input": input_tokens,
        "output": output_tokens,
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
        "totalTokens": total,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def empty_usage() -> dict[str, Any]:
    return make_usage()


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """One summary request as a summarizer receives it (kept by the deterministic one)."""

    system_prompt: str
    prompt: str
    max_tokens: int | None


@dataclass(slots=True)
class SummaryResponse:
    """A summarizer's answer. ``stop_reason``: "stop", "length", "toolUse", "aborted" or "error"
    (``error_message`` then says why); "length", "aborted" and "error" are never stored."""

    text: str
    stop_reason: str = "stop"
    usage: dict[str, Any] = field(default_factory=empty_usage)
    has_tool_call: bool = False
    error_message: str | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Anything that can answer a summary request."""

    def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> SummaryResponse:
        """Answer one request; report failures in the response rather than raising."""
        ...


# ---------------------------------------------------------------------------------------------
# deterministic (tests)


class DeterministicSummarizer:
    """A summarizer without a model: the summary names the request's size, a digest, and the
    first and last non-empty lines of the conversation part of the prompt. Same input, same
    summary.

    ``fail`` makes every call (or only the call number ``fail_on_call``, 1-based) fail:
    "error" (stop reason error), "length" (truncated), or "tool_call" (a tool call in the answer).
    ``requests`` records what each call received.
    """

    def __init__(self, *, fail: str | None = None, fail_on_call: int | None = None,
                 output_tokens_per_call: int = 7) -> None:
        if fail not in (None, "error", "length", "tool_call"):
            raise ValueError(f"fail must be None, 'error', 'length' or 'tool_call', not {fail!r}")
        self.fail = fail
        self.fail_on_call = fail_on_call
        self.output_tokens_per_call = output_tokens_per_call
        self.requests: list[SummaryRequest] = []

    def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> SummaryResponse:
        self.requests.append(SummaryRequest(system_prompt, prompt, max_tokens))
        call = len(self.requests)
        lines = [line for line in prompt.splitlines() if line.strip()]
        conversation = [line for line in lines if line.startswith("[")]
        first = conversation[0] if conversation else (lines[0] if lines else "")
        last = conversation[-1] if conversation else (lines[-1] if lines else "")
        digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        text = (f"Summary #{call} of {len(conversation)} transcript lines ({len(prompt)} chars, "
                f"sha256 {digest}).\nFirst: {first[:200]}\nLast: {last[:200]}")
        usage = make_usage(input_tokens=(len(prompt) + 3) // 4, output_tokens=self.output_tokens_per_call)
        failing = self.fail is not None and (self.fail_on_call is None or self.fail_on_call == call)
        if not failing:
            return SummaryResponse(text, "stop", usage)
        if self.fail == "error":
            return SummaryResponse("", "error", usage, error_message="deterministic failure")
        if self.fail == "length":
            return SummaryResponse(text[: len(text) // 2], "length", usage)
        return SummaryResponse(text, "toolUse", usage, has_tool_call=True)


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible chat completions


def _completions_url(base_url: str) -> str:
    """``…/v1/chat/completions`` for a base URL given with or without its ``/v1``."""
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if base.endswith("/v1"):
        return f"{base}/chat/completions"
    return f"{base}/v1/chat/completions"


def _usage_from_openai(usage: Any) -> dict[str, Any]:
    if not isinstance(usage, dict):
        return empty_usage()

    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    prompt = count(usage.get("prompt_tokens"))
    completion = count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    cached = min(cached, prompt)
    total = count(usage.get("total_tokens")) or prompt + completion
    return make_usage(input_tokens=prompt - cached, output_tokens=completion, cache_read=cached,
                      total_tokens=total)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with content parts
        return "".join(part.get("text", "") for part in content
                       if isinstance(part, dict) and part.get("type") == "text"
                       and isinstance(part.get("text"), str))
    return ""


class OpenAICompatibleSummarizer:
    """Summaries from an OpenAI-compatible chat-completions endpoint.

    ``base_url`` is the server's API root (``http://127.0.0.1:8080/v1`` or without ``/v1``);
    ``api_key`` goes into ``Authorization: Bearer`` when given. One non-streaming request per
    summary: a system message, one user message, ``max_tokens`` when a cap is given; nothing
    about prompt caching. ``finish_reason`` "length" → stop reason "length"; tool calls in the
    answer → ``has_tool_call``; "stop", "end" or none → "stop"; any other (``content_filter``,
    ``network_error``: a summary cut short), an HTTP error, a transport error or an unreadable
    answer → stop reason "error" with a message.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *,
                 timeout: float = 120.0, temperature: float | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        if not model:
            raise ValueError("model is required")
        if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
            raise ValueError("the API key must be printable ASCII (it is sent in an HTTP header)")
        self.base_url = base_url
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.temperature = temperature
        self._transport = transport

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **kwargs: Any) -> OpenAICompatibleSummarizer:
        """Configured by ``PI_STORE_SUMMARY_BASE_URL``, ``PI_STORE_SUMMARY_MODEL`` and the
        optional ``PI_STORE_SUMMARY_API_KEY``; ValueError names what is missing."""
        env = os.environ if environ is None else environ
        base_url = env.get(ENV_BASE_URL, "").strip()
        model = env.get(ENV_MODEL, "").strip()
        missing = [name for name, value in ((ENV_BASE_URL, base_url), (ENV_MODEL, model)) if not value]
        if missing:
            raise ValueError(f"summarizer not configured: set {' and '.join(missing)}")
        api_key = env.get(ENV_API_KEY, "").strip() or None
        if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
            raise ValueError(f"{ENV_API_KEY} must be printable ASCII (it is sent in an HTTP header)")
        return cls(base_url, model, api_key, **kwargs)

    def request_body(self, system_prompt: str, prompt: str, max_tokens: int | None) -> dict[str, Any]:
        """The JSON body sent for one summary."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system_prompt},
                {"role": "user", "content": prompt},
            ],
            "stream": False,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> SummaryResponse:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = _completions_url(self.base_url)
        try:  # ASCII-escaped, as JSON.stringify escapes a lone surrogate (UTF-8 cannot carry one)
            content = json.dumps(self.request_body(system_prompt, prompt, max_tokens), allow_nan=False).encode()
        except ValueError as error:  # a NaN or infinite temperature: no JSON number
            return SummaryResponse("", "error", error_message=f"the request to {url} cannot be sent: {error}")
        try:
            with httpx.Client(timeout=self.timeout, transport=self._transport) as client:
                response = client.post(url, content=content, headers=headers)
        except (httpx.HTTPError, httpx.InvalidURL) as error:  # InvalidURL: not an HTTPError
            return SummaryResponse("", "error", error_message=f"request to {url} failed: {error}")
        if response.status_code >= 400:
            excerpt = response.text[:500].strip()
            return SummaryResponse(
                "", "error",
                error_message=f"HTTP {response.status_code} from {url}" + (f": {excerpt}" if excerpt else ""))
        try:
            data = response.json()
        except (ValueError, RecursionError) as error:  # RecursionError: nested deeper than json can read
            return SummaryResponse("", "error", error_message=f"unreadable answer from {url}: {error!r}")
        usage = _usage_from_openai(data.get("usage") if isinstance(data, dict) else None)
        if isinstance(data, dict) and data.get("error"):  # the server's own words
            said = data["error"].get("message") if isinstance(data["error"], dict) else data["error"]
            return SummaryResponse("", "error", usage, error_message=f"{url}: {said}")
        try:
            choice = data["choices"][0]
            message = choice.get("message") or {}
            if not isinstance(message, dict):
                raise TypeError(f"the choice's message is a {type(message).__name__}, not an object")
        except (KeyError, IndexError, TypeError, AttributeError) as error:
            return SummaryResponse("", "error", usage, error_message=f"unreadable answer from {url}: {error!r}")
        text = _message_text(message.get("content"))
        finish = choice.get("finish_reason")
        has_tool_call = (bool(message.get("tool_calls")) or bool(message.get("function_call"))
                         or finish in ("tool_calls", "function_call"))
        error_message = None
        if finish == "length":
            stop = "length"
        elif finish in ("tool_calls", "function_call") or has_tool_call:
            stop = "toolUse"
        elif finish in (None, "stop", "end"):
            stop = "stop"
        else:  # as Pi's provider: content_filter, network_error, anything unknown (a summary cut short)
            stop, error_message = "error", f"{url}: the answer ended with finish_reason {finish!r}"
        return SummaryResponse(text, stop, usage, has_tool_call=has_tool_call, error_message=error_message)
