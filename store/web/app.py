"""The viewer's ASGI application (Starlette): the pages, the JSON API and the static assets.

Every route is GET (HEAD): nothing here writes, and the engine it is given cannot
(:func:`store.web.data.readonly_engine`). :class:`Guard` wraps the whole application: other
methods get 405, a configured token is required on every request (header, ``?token=`` or the
cookie a ``?token=`` sets), and without a token only loopback ``Host`` names are served (a page
elsewhere cannot reach the viewer by DNS rebinding). Pages carry a Content-Security-Policy that
allows no script and nothing from another origin.
"""

from __future__ import annotations

import codecs
import hmac
from collections.abc import Awaitable, Callable
from functools import lru_cache
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote

from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from store.db.faults import error_line
from store.errors import SessionNotFound, StoreError
from store.format import js_stringify
from store.gc_pause import gc_paused
from store.session_store import SessionStore
from store.tree_view import content_summary, one_line
from store.web import charts, data, render

TOKEN_COOKIE = "pi_store_token"
TOKEN_HEADER = "x-pi-store-token"
CONVERSATION_TAIL = 200  # entries of a long branch shown before "show all"
CONTEXT_TAIL = 300  # context messages shown before "show all"
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
_LONE_SURROGATES = "pi-store-lone-surrogates"  # the codec error handler registered below


class JSJSONResponse(JSONResponse):
    """JSON as the CLI's ``--json`` prints it (``JSON.stringify``'s form)."""

    def render(self, content: Any) -> bytes:
        return js_stringify(content).encode("utf-8", "surrogatepass")


class Guard:
    """ASGI middleware: GET/HEAD only, the token (when set), loopback Host names (when not),
    and the security headers on every response."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = _with_lone_surrogates(scope)
        request = Request(scope)
        authorised = self.token is None or self._authorised(request)
        if request.method not in ("GET", "HEAD"):
            response: Response = PlainTextResponse("read-only: GET only", 405, headers={"Allow": "GET, HEAD"})
        elif not authorised:
            response = PlainTextResponse("a token is required (header X-Pi-Store-Token or ?token=)", 401)
        elif self.token is None and request.url.hostname not in LOOPBACK_HOSTS | {"::1"}:
            response = PlainTextResponse("unknown Host: without --token only loopback names are served", 421)
        else:
            await self.app(scope, receive, self._with_headers(send, request, authorised))
            return
        await response(scope, receive, self._with_headers(send, request, False))

    def _authorised(self, request: Request) -> bool:
        given = (request.headers.get(TOKEN_HEADER) or _bearer(request.headers.get("authorization"))
                 or request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or "")
        return hmac.compare_digest(given.encode(), self.token or b"")

    def _with_headers(self, send: Callable[[dict], Awaitable[None]], request: Request, authorised: bool) -> Callable:
        given = request.query_params.get("token")  # remembered only when it is the token (not when a header was)
        set_cookie = (authorised and self.token is not None and given is not None
                      and hmac.compare_digest(given.encode(), self.token))

        async def wrapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"),
                            (b"cache-control", b"no-store")]
                if set_cookie:  # so that the page's own links and assets carry the token
                    headers.append((b"set-cookie", f"{TOKEN_COOKIE}={given}; "
                                                   "HttpOnly; SameSite=Strict; Path=/".encode()))
                message = {**message, "headers": headers}
            await send(message)

        return wrapped


def _keep_lone_surrogates(exc: UnicodeError) -> tuple[str, int]:
    """Decoding error handler: a UTF-8-style encoded lone surrogate (what :func:`_quote` writes
    for an id holding one; legal in Pi's JSON) decodes to that surrogate, other bad bytes to U+FFFD."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    lead, *tail = exc.object[exc.start:exc.start + 3]
    if lead == 0xED and len(tail) == 2 and 0xA0 <= tail[0] <= 0xBF and 0x80 <= tail[1] <= 0xBF:
        return chr(0xD000 | (tail[0] & 0x3F) << 6 | tail[1] & 0x3F), exc.start + 3
    return "\ufffd", exc.start + 1


codecs.register_error(_LONE_SURROGATES, _keep_lone_surrogates)


def _with_lone_surrogates(scope: dict) -> dict:
    """``scope`` with its path decoded by :func:`_keep_lone_surrogates` (the server's own
    decoding turned a lone surrogate into U+FFFD, so no such id could be found)."""
    raw, root = scope.get("raw_path"), scope.get("root_path", "").encode("latin-1", "replace")
    if not raw or b"%" not in raw or not raw.startswith(root):
        return scope
    return {**scope, "path": unquote(raw[len(root):].decode("latin-1"), errors=_LONE_SURROGATES)}


def _route_suffix(request: Request, suffix: str) -> bool:
    """Whether the path's last segment, after a ``/`` as written, is ``suffix``'s (``/context``;
    ``cont%65xt`` is the same word): not when it follows ``%2F``, the last part of an id that the
    decoded path cannot tell from a route's."""
    raw = request.scope.get("raw_path")
    if raw is None:
        return True
    _, slash, last = raw.rpartition(b"/")
    return bool(slash) and unquote(last.decode("latin-1"), errors=_LONE_SURROGATES) == suffix[1:]


class _SessionId(Convertor):
    """Any text, "/" and line breaks included (Starlette's ``path`` is ``.*``: no newline)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


def query(request: Request) -> QueryParams:
    """The request's query parameters decoded by :func:`_keep_lone_surrogates`."""
    text = request.scope.get("query_string", b"").decode("latin-1")
    return QueryParams(parse_qsl(text, keep_blank_values=True, errors=_LONE_SURROGATES))


def _bearer(value: str | None) -> str | None:
    if value and value.lower().startswith("bearer "):
        return value[7:].strip()
    return None


def session_url(session_id: str, leaf: str | None = None, opened: list[str] | tuple = (), *,
                show_all: bool = False, ctx_all: bool = False, anchor: str | None = None) -> str:
    """The session page's URL for a selected entry, open folds, the whole conversation
    (``show_all``) and every context message (``ctx_all``)."""
    params: list[tuple[str, str]] = [("leaf", leaf)] if leaf is not None else []
    params += [("open", key) for key in opened]
    if show_all:
        params.append(("all", "1"))
    if ctx_all:
        params.append(("ctx", "all"))
    # urlencode's form, with each value quoted once per page rather than once per link
    query = "&".join(f"{key}={_quote_plus(value)}" for key, value in params)
    url = f"/sessions/{_quote(session_id)}" + (f"?{query}" if params else "")
    return url + (f"#{_quote(anchor)}" if anchor else "")


@lru_cache(maxsize=8192)
def _quote(text: str) -> str:
    return quote(text, safe="", errors="surrogatepass")  # ids may hold lone surrogates (JSON allows them)


@lru_cache(maxsize=8192)
def _quote_plus(text: str) -> str:
    return quote_plus(str(text), errors="surrogatepass")


def list_url(params: dict[str, str], **more: str | None) -> str:
    """The sessions page's URL with these query parameters (None drops one)."""
    merged = {**params, **more}
    query = "&".join(f"{_quote_plus(k)}={_quote_plus(v)}" for k, v in merged.items() if v is not None)
    return "/" + (f"?{query}" if query else "")


def usage_url(session_id: str) -> str:
    """The usage page of one session."""
    return f"/usage?session={_quote_plus(session_id)}"


def create_app(store: SessionStore, token: str | None = None) -> Guard:
    """The viewer over ``store`` (give it a read-only engine: :func:`store.web.data.readonly_engine`)."""
    env = Environment(loader=PackageLoader("store.web", "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(clean=render.clean, content=render.content, message=render.message,
                       entry_body=render.entry_body, snippet=render.snippet, pretty=render.pretty_json,
                       one_line=one_line, summary=content_summary, model_name=charts.model_name,
                       text_block=render.text_block, thousands=render.thousands)
    env.globals.update(session_url=session_url, list_url=list_url, usage_url=usage_url)

    def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(**context)
        return HTMLResponse(html.encode("utf-8", "replace"), status)  # text went through clean(): a safety net

    def failure(request: Request, exc: Exception) -> Response:
        if isinstance(exc, DBAPIError):  # a fault of the database (gone, damaged, unreachable): one line
            status, message = 503, error_line(exc)
        else:
            status = 404 if isinstance(exc, (SessionNotFound, data.EntryNotFound)) else 400
            message = str(exc)
        if request.url.path.startswith("/api/"):
            return JSJSONResponse({"error": message}, status)
        return page("error.html", status, message=message)

    def guarded(handler: Callable[[Request, QueryParams], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:  # synchronous: Starlette runs it in its thread pool
            # the parsed entries (no reference cycles) are freed by reference counting when the
            # handler returns: with the collector paused until then it never scans them
            try:
                with gc_paused():
                    return handler(request, query(request))
            except (StoreError, DBAPIError) as exc:
                return failure(request, exc)
        return endpoint

    def sessions_page(request: Request, params: QueryParams) -> Response:
        query = data.ListQuery.from_params(params, data.PAGE_SIZE)
        listing = data.list_sessions(store, query)
        ids = [item["id"] for item in listing["sessions"]]
        text = params.get("q", "").strip()
        search = data.search_hits(store, text) if text else None
        return page("sessions.html", listing=listing, query=query, models=data.session_models(store, ids),
                    search=search, q=text)

    def usage_page(request: Request, params: QueryParams) -> Response:
        session_id = params.get("session")  # "" is an id too (Pi's files may hold one)
        info = store.find_by_id(session_id) if session_id is not None else None
        if session_id is not None and info is None:
            raise SessionNotFound(f"no session {session_id!r} in the store")
        usage = data.usage(store, session_id)
        return page("usage.html", usage=usage, session=info.to_json() if info else None,
                    tokens_chart=charts.tokens_by_day(usage["byDay"]),
                    cost_chart=charts.cost_by_model(usage["stats"]["models"]))

    def session_page(request: Request, params: QueryParams) -> Response:
        session_id = request.path_params["session_id"]
        tail = None if params.get("all") == "1" else CONVERSATION_TAIL
        ctx_tail = None if params.get("ctx") == "all" else CONTEXT_TAIL
        doc, branch, context = data.session_view(store, session_id, params.get("leaf"),
                                                 params.getlist("open"), tail, context=True, context_tail=ctx_tail)
        return page("session.html", doc=doc, info=doc["session"], branch=branch,  # links keep the folds it opened
                    skipped=len(doc["pathIds"]) - len(branch),
                    shown_ids={e.get("id") for e in branch if isinstance(e, dict) and isinstance(e.get("id"), str)},
                    context=context, opened=doc["openFolds"], keep=str(data.KEEP))

    def api_sessions(request: Request, params: QueryParams) -> Response:
        """``list --json``'s list; the next page's cursor, if any, in the ``X-Next-Cursor`` header
        (as the CLI prints it on stderr)."""
        listing = data.list_sessions(store, data.ListQuery.from_params(params))
        cursor = listing["nextCursor"]
        return JSJSONResponse(listing["sessions"], headers={"X-Next-Cursor": cursor} if cursor else None)

    def api_session(request: Request, params: QueryParams, suffix: str = "") -> Response:
        session_id = request.path_params["session_id"] + suffix  # suffix: see api_context
        return JSJSONResponse(data.session_doc(store, session_id, params.get("leaf"), params.getlist("open")))

    def api_context(request: Request, params: QueryParams) -> Response:
        if not _route_suffix(request, "/context"):  # ".../x%2Fcontext": the id is "x/context"
            return api_session(request, params, "/context")
        return JSJSONResponse(data.context_view(store, request.path_params["session_id"], params.get("leaf")))

    def api_search(request: Request, params: QueryParams) -> Response:
        text = params.get("q", "").strip()
        if not text:
            raise data.BadRequest("q (the search text) is required")
        try:
            limit = int(params.get("limit") or data.SEARCH_LIMIT)
        except ValueError as exc:
            raise data.BadRequest("limit is not a number") from exc
        if not 1 <= limit <= data.MAX_LIMIT:  # as /api/sessions answers (0 and -1 were taken as 1)
            raise data.BadRequest(f"limit must be from 1 to {data.MAX_LIMIT}")
        return JSJSONResponse(data.search_hits(store, text, params.get("session") or None, limit))

    def api_usage(request: Request, params: QueryParams) -> Response:
        if "session_id" in request.path_params and not _route_suffix(request, "/usage"):
            return api_session(request, params, "/usage")
        return JSJSONResponse(data.usage(store, request.path_params.get("session_id")))

    static = StaticFiles(directory=str(resources.files("store.web") / "static"))
    # ids may hold "/" and line breaks: the path converter's ".*" stops at a newline
    register_url_convertor("session_id", _SessionId())
    routes = [
        Route("/", guarded(sessions_page)),
        Route("/usage", guarded(usage_page)),
        # ids may hold "/" (the path converter; %2F arrives decoded) or be empty; an id ending in
        # "/context" or "/usage" is told from that route of the id before it by the raw path's %2F
        Route("/sessions/{session_id:session_id}", guarded(session_page)),
        Route("/api/sessions", guarded(api_sessions)),
        Route("/api/usage", guarded(api_usage)),
        Route("/api/search", guarded(api_search)),
        Route("/api/sessions/{session_id:session_id}/context", guarded(api_context)),
        Route("/api/sessions/{session_id:session_id}/usage", guarded(api_usage)),
        Route("/api/sessions/{session_id:session_id}", guarded(api_session)),
        Mount("/static", static, name="static"),
    ]
    return Guard(Starlette(routes=routes), token)
