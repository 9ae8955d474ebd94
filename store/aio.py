"""The asyncio API: :class:`AsyncSessionStore` and :class:`AsyncSessionManager`.

    store = await AsyncSessionStore.connect("postgresql+psycopg://host/db")
    manager = await store.create("/work/project")
    await manager.append_message({"role": "user", "content": "hi", "timestamp": 1})

Both are thin awaitable faces of :class:`~store.session_store.SessionStore` and
:class:`~store.manager.SessionManager`: the rules (tree columns, listing deltas, version checks,
claims, the single-append fast path) exist once, in the synchronous code, which is given the
``sync_engine`` of an ``AsyncEngine`` (``aiosqlite``, psycopg's ``AsyncConnection``; see
``store.db.engine.make_async_engine``). Each call runs that code with SQLAlchemy's
``greenlet_spawn`` — the mechanism behind ``AsyncConnection.run_sync`` — so every statement it
sends through the driver suspends the calling task instead of blocking the event loop, and a
call checks out a pooled connection exactly as the synchronous one does.

One :class:`AsyncSessionStore` may be shared by any number of tasks on the event loop it was
connected on (its pooled connections belong to that loop); a manager belongs to one task at a
time (its leaf and an open ``batch`` are its own). Reading and writing session files
(``import_file``, ``export_jsonl``) and the private in-memory database of a session that holds
no message yet are local work that runs on the loop's thread. A cancelled call finishes its
database work first (see ``_run``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy.util import await_only, greenlet_spawn

from store import new_entries, services
from store.db.engine import close_engine, default_url, ensure_schema, make_async_engine, resolve_url
from store.manager import SessionManager
from store.session_store import SessionInfo, SessionStore

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from store.analysis.search import SearchHit
    from store.analysis.stats import SessionStats
    from store.interchange.importing import ImportReport
    from store.ownership import Claim
    from store.retention import DeleteReport, PruneReport, RetentionPolicy
    from store.tree import TreeNode

T = TypeVar("T")


class AsyncSummarizer(Protocol):
    """A summarizer whose ``summarize`` is a coroutine (a plain :class:`~store.services.Summarizer`
    is accepted too and runs in a worker thread)."""

    async def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> services.SummaryResponse: ...


class _OnTheLoop:
    """A :class:`~store.services.Summarizer` for the shared compaction code (which runs in a
    greenlet): each request suspends the greenlet until the awaited summary arrives, so the
    event loop keeps serving other tasks. A synchronous summarizer is called in a worker thread,
    and what it returns is awaited when it is awaitable: an ``async def`` behind a plain decorator
    (which ``iscoroutinefunction`` does not see) gave compaction the coroutine as its summary."""

    def __init__(self, summarizer: AsyncSummarizer | services.Summarizer) -> None:
        self._summarizer = summarizer

    def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> services.SummaryResponse:
        summarize = self._summarizer.summarize
        if inspect.iscoroutinefunction(summarize):
            return await_only(summarize(system_prompt, prompt, max_tokens))
        response = await_only(asyncio.to_thread(summarize, system_prompt, prompt, max_tokens))
        return await_only(response) if inspect.isawaitable(response) else response


class _Unstoppable(asyncio.Task):
    """The task a store call runs in: it cannot be cancelled, so that a sweep cancelling every
    task (a shutdown handler, ``asyncio.run`` ending) never stops a call before or while it runs
    — a batch whose ending never ran kept its transaction and the database's write lock."""

    def cancel(self, msg: Any = None) -> bool:
        return False


async def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` (synchronous store code) with its driver calls awaited.

    A cancellation that arrives while the call runs is delivered once the call has finished: a
    call's database work is never cut off in the middle, where a commit may have been sent but
    the manager would not know it (its leaf and version would then disagree with the store, and
    its next write would fail with ``SessionChanged``). The call runs in a task of its own that
    nothing can cancel (:class:`_Unstoppable`)."""
    call = _Unstoppable(greenlet_spawn(fn, *args, **kwargs), loop=asyncio.get_running_loop())
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError as exc:
        if call.done():  # the call itself raised it, not the caller
            raise
        cancelled = exc
    while not call.done():  # the caller was: let the call finish, however often it is cancelled again
        with suppress(asyncio.CancelledError):
            await asyncio.wait((call,))
    if not call.cancelled():
        call.exception()  # retrieved: the cancellation is what the caller gets
    raise cancelled


class AsyncSessionStore:
    """Many sessions in one database, awaitable (see the module docstring). ``sync`` is the
    :class:`SessionStore` doing the work, on the async driver: called directly, outside this
    class, its methods raise ``MissingGreenlet``."""

    def __init__(
        self, engine: AsyncEngine, clock: Callable[[], float] | None = None, ids: new_entries.IdSource | None = None
    ) -> None:
        self.engine = engine
        self.sync = SessionStore(engine.sync_engine, clock, ids)  # the one implementation

    @classmethod
    async def connect(
        cls, url: str | None = None, clock: Callable[[], float] | None = None, ids: new_entries.IdSource | None = None
    ) -> AsyncSessionStore:
        """Open (and on first use create or upgrade) the database at ``url``: the URLs and plain
        file paths :meth:`SessionStore.connect` takes, on the async drivers."""
        engine = make_async_engine(resolve_url(url) if url else default_url(make_folder=True))
        await _run(ensure_schema, engine.sync_engine)
        return cls(engine, clock, ids)

    @property
    def clock(self) -> Callable[[], float]:
        return self.sync.clock

    async def close(self) -> None:
        """Close the database connections; the store (and its managers) cannot be used after:
        calls raise ``StoreClosed``. Calls running now finish first (see :func:`_run`)."""
        await _run(close_engine, self.engine.sync_engine)

    async def __aenter__(self) -> AsyncSessionStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _manager(self, manager: SessionManager) -> AsyncSessionManager:
        return AsyncSessionManager(self, manager)

    # ------------------------------------------------------------------ sessions
    async def create(
        self, cwd: str, session_id: str | None = None, parent_session: str | None = None
    ) -> AsyncSessionManager:
        """A new persistent session; nothing is stored until it holds a user or assistant message."""
        return self._manager(await _run(self.sync.create, cwd, session_id, parent_session))

    async def in_memory(self, cwd: str = ".", session_id: str | None = None) -> AsyncSessionManager:
        return self._manager(await _run(self.sync.in_memory, cwd, session_id))

    async def open(self, session_id: str) -> AsyncSessionManager:
        return self._manager(await _run(self.sync.open, session_id))

    async def continue_recent(self, cwd: str) -> AsyncSessionManager:
        return self._manager(await _run(self.sync.continue_recent, cwd))

    async def fork_from(
        self, session_id: str, target_cwd: str, new_session_id: str | None = None
    ) -> AsyncSessionManager:
        return self._manager(await _run(self.sync.fork_from, session_id, target_cwd, new_session_id))

    async def find_by_id(self, session_id: str) -> SessionInfo | None:
        return await _run(self.sync.find_by_id, session_id)

    async def list(self, cwd: str, **options: Any) -> list[SessionInfo]:
        """Sessions of one working directory (``options``: see :meth:`SessionStore.list_all`)."""
        return await _run(self.sync.list, cwd, **options)

    async def list_all(self, **options: Any) -> list[SessionInfo]:
        return await _run(self.sync.list_all, **options)

    async def search(self, query: str, **options: Any) -> list[SearchHit]:
        return await _run(self.sync.search, query, **options)

    async def stats(self, session_id: str | None = None) -> SessionStats:
        return await _run(self.sync.stats, session_id)

    async def delete(self, session_ids: str | Iterable[str], **options: Any) -> DeleteReport:
        return await _run(self.sync.delete, session_ids, **options)

    async def prune(self, policy: RetentionPolicy, apply: bool = False, *, vacuum: bool = True,
                    force: bool = False) -> PruneReport:
        """``SessionStore.prune`` (a dry run unless ``apply``; an applied prune on SQLite ends with VACUUM)."""
        return await _run(self.sync.prune, policy, apply, vacuum=vacuum, force=force)

    # ------------------------------------------------------------------ claims
    async def claim(self, session_id: str, owner: str, ttl_ms: int | None = 60_000, *, force: bool = False) -> Claim:
        return await _run(self.sync.claim, session_id, owner, ttl_ms, force=force)

    async def release_claim(self, session_id: str, *, owner: str | None = None, token: int | None = None) -> bool:
        return await _run(self.sync.release_claim, session_id, owner=owner, token=token)

    async def claims(self) -> list[Claim]:
        return await _run(self.sync.claims)

    # ------------------------------------------------------------------ interchange
    async def import_jsonl(self, path: str | os.PathLike, *, keep_non_sessions: bool = False) -> str:
        return await _run(self.sync.import_jsonl, path, keep_non_sessions=keep_non_sessions)

    async def import_file(self, path: str | os.PathLike, **options: Any) -> ImportReport:
        return await _run(self.sync.import_file, path, **options)

    async def import_path(self, *paths: str | os.PathLike, **options: Any) -> list[ImportReport]:
        """Session files, or every ``*.jsonl`` below folders: one report per file (``SessionStore.import_path``)."""
        return await _run(self.sync.import_path, *paths, **options)

    async def export_jsonl(self, session_id: str, path: str | os.PathLike, as_migrated: bool = False,
                           force: bool = False) -> int:
        return await _run(self.sync.export_jsonl, session_id, path, as_migrated, force)

    async def iter_export(self, session_id: str, as_migrated: bool = False) -> AsyncIterator[bytes]:
        """The bytes of :meth:`export_jsonl`, in chunks of whole lines (one read transaction)."""
        chunks = self.sync.iter_export(session_id, as_migrated)
        try:
            while (chunk := await _run(next, chunks, None)) is not None:
                yield chunk
        finally:
            await _run(chunks.close)


class AsyncSessionManager:
    """One session, awaitable: the operations of :class:`~store.manager.SessionManager`
    (``sync``, which does the work)."""

    def __init__(self, store: AsyncSessionStore, manager: SessionManager) -> None:
        self.store = store
        self.sync = manager  # the one implementation

    # identity and leaf: held by the manager, no database work
    @property
    def session_id(self) -> str:
        return self.sync.session_id

    @property
    def cwd(self) -> str:
        return self.sync.cwd

    def get_session_id(self) -> str:
        return self.sync.get_session_id()

    def get_cwd(self) -> str:
        return self.sync.get_cwd()

    def is_persisted(self) -> bool:
        return self.sync.is_persisted()

    def get_version(self) -> int:
        return self.sync.get_version()

    def get_leaf_id(self) -> str | None:
        return self.sync.get_leaf_id()

    def get_claim(self) -> Claim | None:
        return self.sync.get_claim()

    def reset_leaf(self) -> None:
        self.sync.reset_leaf()

    def close(self) -> None:
        """Release a private (not yet stored or in-memory) session's database."""
        self.sync.close()

    async def refresh(self) -> None:
        await _run(self.sync.refresh)

    # ------------------------------------------------------------------ claims
    async def claim(self, owner: str, ttl_ms: int | None = 60_000, *, force: bool = False) -> Claim:
        return await _run(self.sync.claim, owner, ttl_ms, force=force)

    async def renew_claim(self, ttl_ms: int | None = 60_000) -> Claim:
        return await _run(self.sync.renew_claim, ttl_ms)

    async def release_claim(self) -> None:
        await _run(self.sync.release_claim)

    # ------------------------------------------------------------------ writing
    @asynccontextmanager
    async def batch(self) -> AsyncIterator[AsyncSessionManager]:
        """``async with manager.batch():`` — the block's appends in one write transaction,
        committed when it ends, nothing stored when it raises (``SessionManager.batch``). The
        transaction, and on SQLite the database's write lock, is held across the block's awaits."""
        block = self.sync.batch()
        entered = False

        def enter() -> None:
            nonlocal entered
            block.__enter__()
            entered = True

        try:
            # inside the try: a cancellation that arrives while the block waits for its lock is
            # delivered once it holds the lock (see _run), and must then end the block at once
            await _run(enter)
            yield self
        except BaseException as exc:
            if not entered or not await _run(block.__exit__, type(exc), exc, exc.__traceback__):
                raise
        else:
            await _run(block.__exit__, None, None, None)

    async def append_message(self, message: Any) -> str:
        return await _run(self.sync.append_message, message)

    async def append_thinking_level_change(self, thinking_level: str) -> str:
        return await _run(self.sync.append_thinking_level_change, thinking_level)

    async def append_model_change(self, provider: str, model_id: str) -> str:
        return await _run(self.sync.append_model_change, provider, model_id)

    async def append_usage(self, kind: str, provider: str, model: str, usage: dict, note: str | None = None) -> dict:
        return await _run(self.sync.append_usage, kind, provider, model, usage, note)

    async def append_compaction(
        self,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        details: Any = None,
        from_hook: bool | None = None,
        usage: Any = None,
    ) -> str:
        return await _run(
            self.sync.append_compaction, summary, first_kept_entry_id, tokens_before, details, from_hook, usage
        )

    async def append_custom_entry(self, custom_type: str, data: Any = None) -> str:
        return await _run(self.sync.append_custom_entry, custom_type, data)

    async def append_session_info(self, name: str) -> str:
        return await _run(self.sync.append_session_info, name)

    async def append_custom_message_entry(
        self, custom_type: str, content: Any, display: bool, details: Any = None
    ) -> str:
        return await _run(self.sync.append_custom_message_entry, custom_type, content, display, details)

    async def append_label_change(self, target_id: str, label: str | None) -> str:
        return await _run(self.sync.append_label_change, target_id, label)

    async def append_context_edit(self, target_id: str, replacement: dict | None) -> str:
        return await _run(self.sync.append_context_edit, target_id, replacement)

    # ------------------------------------------------------------------ leaf movement
    async def branch(self, branch_from_id: str) -> None:
        await _run(self.sync.branch, branch_from_id)

    async def branch_with_summary(
        self,
        branch_from_id: str | None,
        summary: str,
        details: Any = None,
        from_hook: bool | None = None,
        usage: Any = None,
    ) -> str:
        return await _run(self.sync.branch_with_summary, branch_from_id, summary, details, from_hook, usage)

    async def branch_with_generated_summary(
        self, target_id: str | None, summarizer: AsyncSummarizer | services.Summarizer, **options: Any
    ) -> str | None:
        """``SessionManager.branch_with_generated_summary``; a cancellation while the summary is
        being made stops it and writes nothing (as :meth:`compact`)."""
        old_path, target_path = await _run(self.sync.paths_to_summarize, target_id)
        if await _run(self.sync.move_when_nothing_is_left, old_path, target_path, target_id):
            return None
        result = await greenlet_spawn(services.summarize_branch, old_path, target_path, _OnTheLoop(summarizer),
                                      **options)
        return await _run(self.sync.branch_with_summary, target_id, result.summary, details=result.details,
                          from_hook=False, usage=result.usage)

    async def create_branched_session(self, leaf_id: str) -> str:
        return await _run(self.sync.create_branched_session, leaf_id)

    # ------------------------------------------------------------------ reading
    async def get_leaf_entry(self) -> dict | None:
        return await _run(self.sync.get_leaf_entry)

    async def get_entry(self, entry_id: str) -> dict | None:
        return await _run(self.sync.get_entry, entry_id)

    async def get_branch(self, from_id: str | None = None) -> list:
        return await _run(self.sync.get_branch, from_id)

    async def get_branch_ids(self, from_id: str | None = None) -> list[str | None]:
        return await _run(self.sync.get_branch_ids, from_id)

    async def get_children(self, parent_id: str) -> list[dict]:
        return await _run(self.sync.get_children, parent_id)

    async def get_label(self, entry_id: str) -> str | None:
        return await _run(self.sync.get_label, entry_id)

    async def get_session_name(self) -> str | None:
        return await _run(self.sync.get_session_name)

    async def get_header(self) -> dict | None:
        return await _run(self.sync.get_header)

    async def get_entries(self) -> list:
        return await _run(self.sync.get_entries)

    async def get_tree(self) -> list[TreeNode]:
        return await _run(self.sync.get_tree)

    # ------------------------------------------------------------------ context
    async def context_path(self) -> list:
        """The entries of the leaf's path that its context depends on (``SessionManager.context_path``)."""
        return await _run(self.sync.context_path)

    async def build_context_entries(self) -> list:
        return await _run(self.sync.build_context_entries)

    async def build_session_projection(self) -> services.Projection:
        return await _run(self.sync.build_session_projection)

    async def build_session_context(self) -> services.SessionContext:
        return await _run(self.sync.build_session_context)

    async def prepare_compaction(
        self, settings: services.CompactionSettings | None = None
    ) -> services.CompactionPreparation | None:
        return await _run(self.sync.prepare_compaction, settings)

    async def compact(
        self,
        summarizer: AsyncSummarizer | services.Summarizer,
        settings: services.CompactionSettings | None = None,
        *,
        model_max_tokens: int | None = None,
        custom_instructions: str | None = None,
    ) -> str | None:
        """``SessionManager.compact`` with an awaitable summarizer (or a plain one, run in a
        worker thread); no transaction is open while the summary is being made, and a
        cancellation then stops it and writes nothing (only the reads before it and the append
        after it finish first, see :func:`_run`)."""
        preparation = await _run(self.sync.prepare_compaction, settings)
        if preparation is None:
            return None
        result = await greenlet_spawn(services.compact, preparation, _OnTheLoop(summarizer),
                                      model_max_tokens=model_max_tokens, custom_instructions=custom_instructions)
        return await _run(self.sync.append_compaction, result.summary, result.first_kept_entry_id,
                          result.tokens_before, details=result.details, from_hook=False, usage=result.usage)
