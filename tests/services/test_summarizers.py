"""The OpenAI-compatible summarizer against a local chat-completions server (127.0.0.1 only).

The server is ``http.server`` in a thread on an ephemeral port; each test queues the answers it
should give and reads back the requests it received.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from store.services import (
    CompactionSettings,
    DeterministicSummarizer,
    OpenAICompatibleSummarizer,
    SummaryFailed,
    compact,
    prepare_compaction,
    summarize_branch,
)
from store.services.summarizers import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL
from tests.services.builders import PathBuilder, tool
from tests.services.test_branch_summary import _tree

LONG = "lorem ipsum dolor sit amet " * 40


class ChatServer:
    """A minimal ``/v1/chat/completions`` server: answers from a queue, records requests."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any]] = []
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                status, payload = server.answers.pop(0) if server.answers else (200, server.answer("default"))
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @staticmethod
    def answer(text: str | None, finish: str = "stop", tool_calls: list | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        return {
            "id": "chatcmpl-1", "object": "chat.completion", "model": "local-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
                      "prompt_tokens_details": {"cached_tokens": 20}},
        }

    def queue(self, *answers: tuple[int, Any]) -> None:
        self.answers.extend(answers)


@pytest.fixture
def chat_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = ChatServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        server.thread.join(timeout=5)


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def _assert_no_caching(body: dict[str, Any]) -> None:
    assert set(body) <= {"model", "messages", "max_tokens", "stream"}
    assert not [key for key in _keys(body) if "cache" in key.lower()]
    assert body["stream"] is False


def test_normal_answer(chat_server: ChatServer) -> None:
    chat_server.queue((200, ChatServer.answer("## Goal\nship it")))
    summarizer = OpenAICompatibleSummarizer(chat_server.base_url, "local-model", api_key="sk-test", timeout=5)
    response = summarizer.summarize("SYSTEM", "PROMPT", 1234)
    assert response.text == "## Goal\nship it"
    assert response.stop_reason == "stop" and not response.has_tool_call and response.error_message is None
    assert response.usage["input"] == 100 and response.usage["cacheRead"] == 20
    assert response.usage["output"] == 30 and response.usage["totalTokens"] == 150
    [request] = chat_server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    body = request["body"]
    assert body["model"] == "local-model" and body["max_tokens"] == 1234
    assert body["messages"] == [{"role": "system", "content": "SYSTEM"},
                                {"role": "user", "content": "PROMPT"}]
    _assert_no_caching(body)


def test_base_url_without_v1_and_no_key(chat_server: ChatServer) -> None:
    base = chat_server.base_url.removesuffix("/v1")
    response = OpenAICompatibleSummarizer(base, "m", timeout=5).summarize("s", "p", None)
    assert response.stop_reason == "stop"
    [request] = chat_server.requests
    assert request["path"] == "/v1/chat/completions"
    assert "Authorization" not in request["headers"]
    assert "max_tokens" not in request["body"]


def test_length_answer_is_a_failure(chat_server: ChatServer) -> None:
    chat_server.queue((200, ChatServer.answer("## Goal\nhalf a summ", finish="length")))
    response = OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5).summarize("s", "p", 10)
    assert response.stop_reason == "length"


def test_tool_call_answer(chat_server: ChatServer) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"x\"}"}}
    chat_server.queue((200, ChatServer.answer(None, finish="tool_calls", tool_calls=[call])))
    response = OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5).summarize("s", "p", 10)
    assert response.has_tool_call and response.stop_reason == "toolUse" and response.text == ""


def test_http_500_is_an_error(chat_server: ChatServer) -> None:
    chat_server.queue((500, {"error": {"message": "model crashed"}}))
    response = OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5).summarize("s", "p", 10)
    assert response.stop_reason == "error"
    assert "HTTP 500" in response.error_message and "model crashed" in response.error_message


def test_unreachable_server_is_an_error() -> None:
    summarizer = OpenAICompatibleSummarizer("http://127.0.0.1:9/v1", "m", timeout=2)
    response = summarizer.summarize("s", "p", 10)
    assert response.stop_reason == "error" and "failed" in response.error_message


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BASE_URL, "http://127.0.0.1:8080/v1")
    monkeypatch.setenv(ENV_MODEL, "qwen")
    monkeypatch.delenv(ENV_API_KEY, raising=False)
    summarizer = OpenAICompatibleSummarizer.from_env(timeout=3)
    assert (summarizer.base_url, summarizer.model, summarizer.api_key, summarizer.timeout) == (
        "http://127.0.0.1:8080/v1", "qwen", None, 3)
    monkeypatch.setenv(ENV_API_KEY, "k")
    assert OpenAICompatibleSummarizer.from_env().api_key == "k"
    monkeypatch.setenv(ENV_API_KEY, "ключ")
    with pytest.raises(ValueError, match=f"^{ENV_API_KEY} must be printable ASCII"):
        OpenAICompatibleSummarizer.from_env()
    monkeypatch.delenv(ENV_MODEL)
    with pytest.raises(ValueError, match=ENV_MODEL):
        OpenAICompatibleSummarizer.from_env()


def _split_turn_path() -> list[dict[str, Any]]:
    b = PathBuilder()
    b.system("Agent.", toolsAdded=[tool("read", "read")])
    b.user("EARLY question. " + LONG)
    b.assistant("EARLY answer. " + LONG, usage_total=700)
    b.user("ORIGINAL-REQUEST: port the build to meson.")
    for i in range(6):
        b.assistant(f"step {i}", tool_calls=[(f"t{i}", "read", {"path": f"build/file{i}.txt"})])
        b.tool_result(f"t{i}", "read", LONG)
    b.assistant("STEP-FINAL: done. " + LONG, usage_total=5000)
    return b.entries


@pytest.mark.parametrize("model_max", [None, 3000, 0])
def test_compaction_through_the_server_uses_the_caps(chat_server: ChatServer, model_max: int | None) -> None:
    settings = CompactionSettings(keep_recent_tokens=800)  # reserve 16384: caps 13107 and 8192
    prep = prepare_compaction(_split_turn_path(), settings)
    assert prep is not None and prep.is_split_turn
    chat_server.queue((200, ChatServer.answer("HISTORY")), (200, ChatServer.answer("PREFIX")))
    summarizer = OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5)
    result = compact(prep, summarizer, model_max_tokens=model_max)
    history, prefix = (request["body"] for request in chat_server.requests)
    limit = model_max if model_max else None
    assert history["max_tokens"] == (min(13107, limit) if limit else 13107)
    assert prefix["max_tokens"] == (min(8192, limit) if limit else 8192)
    for body in (history, prefix):
        _assert_no_caching(body)
    assert "ORIGINAL-REQUEST" in prefix["messages"][1]["content"]
    assert result.summary.startswith("HISTORY\n\n---\n\n") and "PREFIX" in result.summary
    assert result.usage["totalTokens"] == 300 and result.usage["cacheRead"] == 40


@pytest.mark.parametrize("reserve", [0, 1])
def test_a_reserve_that_leaves_no_output_is_refused_before_any_request(chat_server: ChatServer, reserve: int) -> None:
    """Its caps are 0 tokens (floor(0.8 * reserve), floor(0.5 * reserve)): every request went out
    with max_tokens 0, which servers refuse ("max_tokens must be at least 1")."""
    prep = prepare_compaction(_split_turn_path(), CompactionSettings(reserve_tokens=reserve, keep_recent_tokens=800))
    assert prep is not None
    summarizer = OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5)
    with pytest.raises(ValueError, match=rf"^a reserve of {reserve} tokens leaves no room for a summary .* least 2$"):
        compact(prep, summarizer)
    with pytest.raises(ValueError, match="the reserve must be at least 2"):
        summarize_branch(*_tree(), summarizer, reserve_tokens=reserve)
    assert chat_server.requests == []
    least = prepare_compaction(_split_turn_path(), CompactionSettings(reserve_tokens=2, keep_recent_tokens=800))
    assert least is not None
    chat_server.queue((200, ChatServer.answer("HISTORY")), (200, ChatServer.answer("PREFIX")))
    compact(least, summarizer)  # the least reserve: a cap of 1 token each
    assert [request["body"]["max_tokens"] for request in chat_server.requests] == [1, 1]


@pytest.mark.parametrize("bad", ["length", "tool_calls", "500", "content_filter", "network_error", "unknown"])
def test_compaction_refuses_bad_answers(chat_server: ChatServer, bad: str) -> None:
    prep = prepare_compaction(_split_turn_path(), CompactionSettings(keep_recent_tokens=800))
    assert prep is not None
    if bad == "length":
        second = (200, ChatServer.answer("PREF", finish="length"))
    elif bad == "tool_calls":
        call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        second = (200, ChatServer.answer("", finish="tool_calls", tool_calls=[call]))
    elif bad == "500":
        second = (500, "internal error")
    else:  # as Pi's provider: a finish reason it does not know is an error (a summary cut short)
        second = (200, ChatServer.answer("PREF", finish=bad))
    chat_server.queue((200, ChatServer.answer("HISTORY")), second)
    with pytest.raises(SummaryFailed):
        compact(prep, OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5))
    assert len(chat_server.requests) == 2


def _without_message(answer: dict[str, Any]) -> dict[str, Any]:
    del answer["choices"][0]["message"]
    return answer


@pytest.mark.parametrize("history", [ChatServer.answer(""), ChatServer.answer(None), ChatServer.answer(" \n\t"),
                                     _without_message(ChatServer.answer("x"))],
                         ids=["empty", "null", "blank", "no message"])
def test_an_answer_without_text_is_no_summary(chat_server: ChatServer, history: dict) -> None:
    """Once stored as the checkpoint: the compaction then stood for the whole history with an
    empty summary (exit 0, the model's context wiped but for the file lists)."""
    prep = prepare_compaction(_split_turn_path(), CompactionSettings(keep_recent_tokens=800))
    assert prep is not None
    chat_server.queue((200, history))
    with pytest.raises(SummaryFailed, match="the model's answer holds no text"):
        compact(prep, OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5))


def test_a_branch_summary_without_text_is_kept_as_pi_keeps_it(chat_server: ChatServer) -> None:
    """Pi's branch summary of an empty answer is its preamble and the file lists (it replaces no
    history); only a compaction's summary is refused (checked in Pi's compaction.js and
    branch-summarization.js of the oracle's install)."""
    old_path, target_path = _tree()
    chat_server.queue((200, ChatServer.answer("")))
    result = summarize_branch(old_path, target_path, OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5),
                              context_window=32768)
    assert result.summary.startswith("The user worked on another branch of this conversation")


@pytest.mark.parametrize(("payload", "said"), [
    ({"choices": [{"message": "plain string"}]}, "the choice's message is a str"),
    ({"choices": [{"message": ["a"]}]}, "the choice's message is a list"),
    ({"error": {"message": "model overloaded"}}, "model overloaded"),
    ({"error": "quota exceeded"}, "quota exceeded"),
    ("[1, 2]", "unreadable answer"),
    ("[" * 100_000 + "]" * 100_000, "unreadable answer"),  # deeper than json reads: RecursionError
])
def test_odd_answers_are_errors_that_say_what_came(chat_server: ChatServer, payload: Any, said: str) -> None:
    """A message that is not an object raised AttributeError out of summarize(); an error body
    was reported as "KeyError('choices')" instead of the server's message."""
    chat_server.queue((200, payload))
    response = OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5).summarize("s", "p", 10)
    assert response.stop_reason == "error" and said in response.error_message, response.error_message


def test_a_lone_surrogate_in_the_prompt_is_sent_escaped(chat_server: ChatServer) -> None:
    """Pi's files may hold lone surrogates; UTF-8 cannot carry one (httpx's own JSON encoding
    raised UnicodeEncodeError out of summarize()); JSON's escape can, as JSON.stringify writes it."""
    chat_server.queue((200, ChatServer.answer("SUMMARY")))
    response = OpenAICompatibleSummarizer(chat_server.base_url, "m", timeout=5).summarize("s", "p \ud800 q", 10)
    assert (response.stop_reason, response.text) == ("stop", "SUMMARY")
    assert chat_server.requests[0]["body"]["messages"][1]["content"] == "p \ud800 q"


def test_a_url_or_key_that_cannot_be_sent_is_said_so() -> None:
    response = OpenAICompatibleSummarizer("http://[::1", "m", timeout=2).summarize("s", "p", 10)
    assert response.stop_reason == "error" and "request to http://[::1" in response.error_message
    response = OpenAICompatibleSummarizer("http://127.0.0.1:9/v1", "m", temperature=float("nan")).summarize("s", "p", 1)
    assert response.stop_reason == "error" and "cannot be sent" in response.error_message  # NaN is no JSON
    with pytest.raises(ValueError, match="API key must be printable ASCII"):
        OpenAICompatibleSummarizer("http://127.0.0.1:9/v1", "m", "ключ")


def test_deterministic_summarizer_is_reproducible() -> None:
    first = DeterministicSummarizer().summarize("s", "[user]: a\n\n[assistant]: b", 10)
    second = DeterministicSummarizer().summarize("s", "[user]: a\n\n[assistant]: b", 10)
    assert first == second and first.stop_reason == "stop"
    assert "First: [user]: a" in first.text and "Last: [assistant]: b" in first.text
