"""The async API (``store.aio``) with the sync API's call shapes, so that the sync behavioural
suites run unchanged against it (``pytest.mark.both_apis``, see ``tests/conftest.py``).

:class:`SyncFace` is a thin, generic proxy: every attribute of the wrapped ``AsyncSessionStore``
or ``AsyncSessionManager`` is looked up on it, and every call is made on a real asyncio event
loop running in a thread of its own (an anyio blocking portal), the way an async application
makes it: a coroutine is awaited there, a plain method (``get_leaf_id``, ``reset_leaf``) is
called there, an async context manager (``batch()``) is entered and left there, an async
iterator (``iter_export``) is pulled there. What comes back is given the same face when it is
an object of the async API (the manager of ``open``/``create``). Nothing of the store's
behaviour is re-implemented here: an attribute the async API lacks is an ``AttributeError``.

Where the two APIs deliberately differ, the face says so:

* summarizers: the async API takes an awaitable summarizer (a plain one is run in a worker
  thread). A plain summarizer passed by a sync test is handed over as an awaitable one
  (:class:`AwaitableSummarizer`), so the suites drive the async API's own path;
* ``engine``: the async store's is an ``AsyncEngine``; the suites read rows with
  ``store.engine``, so the face's ``engine`` is a synchronous engine of its own on the same
  database (for the test's inspection, never used by the store under test).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from functools import partial
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal
from sqlalchemy import Engine

from store import new_entries, services
from store.aio import AsyncSessionManager, AsyncSessionStore
from store.db.engine import make_async_engine, make_engine


class AwaitableSummarizer:
    """A plain summarizer (``DeterministicSummarizer``, ...) as the async API's awaitable one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> services.SummaryResponse:
        return self.inner.summarize(system_prompt, prompt, max_tokens)


def _awaitable_summarizer(value: Any) -> Any:
    summarize = getattr(value, "summarize", None)
    if callable(summarize) and not inspect.iscoroutinefunction(summarize):
        return AwaitableSummarizer(value)
    return value


class SyncFace:
    """An object of ``store.aio`` whose calls are made on ``portal``'s event loop and waited for."""

    def __init__(self, target: AsyncSessionStore | AsyncSessionManager, portal: BlockingPortal) -> None:
        self._target = target
        self._portal = portal

    def __repr__(self) -> str:
        return f"SyncFace({self._target!r})"

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not inspect.ismethod(value):  # a property (session_id, clock) is read here: no database work
            return self._face(value)

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(_awaitable_summarizer(a) for a in args)
            kwargs = {k: _awaitable_summarizer(v) for k, v in kwargs.items()}
            return self._face(self._portal.call(partial(value, *args, **kwargs)))

        return call

    def _face(self, value: Any) -> Any:
        """A result of the async API as the sync API returns it."""
        if isinstance(value, AsyncSessionManager | AsyncSessionStore):
            return SyncFace(value, self._portal)
        if isinstance(value, AbstractAsyncContextManager):
            return self._entered(value)
        if isinstance(value, AsyncIterator):
            return self._pulled(value)
        return value

    @contextmanager
    def _entered(self, cm: AbstractAsyncContextManager) -> Iterator[Any]:
        with self._portal.wrap_async_context_manager(cm) as target:
            yield self._face(target)

    def _pulled(self, items: AsyncIterator) -> Iterator[Any]:
        try:
            while True:
                try:
                    yield self._portal.call(items.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                self._portal.call(aclose)


class SyncStoreFace(SyncFace):
    """An ``AsyncSessionStore`` with the sync face, plus ``engine``: a synchronous engine on the
    same database for the tests' own reads of rows (see the module docstring)."""

    def __init__(self, target: AsyncSessionStore, portal: BlockingPortal, inspection_url: str) -> None:
        super().__init__(target, portal)
        self.engine: Engine = make_engine(inspection_url)

    def close(self) -> None:
        self.engine.dispose()
        self._portal.call(self._target.close)


@contextmanager
def event_loop() -> Iterator[BlockingPortal]:
    """A running asyncio event loop in a thread of its own, for :class:`SyncFace` calls."""
    with start_blocking_portal("asyncio") as portal:
        yield portal


@contextmanager
def async_store(
    url: str, clock: Callable[[], float] | None = None, ids: new_entries.IdSource | None = None
) -> Iterator[SyncStoreFace]:
    """``AsyncSessionStore.connect(url, ...)`` on an event loop of its own, with the sync face."""
    with event_loop() as portal:
        target = portal.call(partial(AsyncSessionStore.connect, url, clock=clock, ids=ids))
        face = SyncStoreFace(target, portal, url)
        try:
            yield face
        finally:
            face.close()


@contextmanager
def async_stores(url: str) -> Iterator[Callable[[Callable[[], float], new_entries.IdSource], SyncFace]]:
    """Makes an ``AsyncSessionStore`` (with the sync face) per clock and id source, all on one
    async engine on ``url``, whose schema must exist: the operation scripts' stores."""
    with event_loop() as portal:
        engine = make_async_engine(url)
        try:
            yield lambda clock, ids: SyncFace(AsyncSessionStore(engine, clock, ids), portal)
        finally:
            portal.call(engine.dispose)
