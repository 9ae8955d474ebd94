"""Many threads on one ``SessionStore``: each appends to a session of its own (single appends and a
batch, with reads in between), some also to one session they share. Used directly on both
engines (``tests/test_threads.py``) and through PgBouncer (``tests/test_pgbouncer.py``)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from store.analysis.readonly import run_sql
from store.errors import SessionChanged
from store.session_store import SessionStore


@dataclass
class Writer:
    """What one thread did: its session, the ids the store acknowledged, the conflicts it met."""

    index: int
    own_id: str = ""
    own_ids: list[str] = field(default_factory=list)
    shared_ids: list[str] = field(default_factory=list)
    conflicts: Counter = field(default_factory=Counter)  # session id -> SessionChanged raised there
    error: BaseException | None = None


@dataclass(frozen=True)
class Workload:
    threads: int = 8
    sharing: int = 4  # of them, also append to the shared session
    singles: int = 12
    batch: int = 8
    shared: int = 6  # appends of each sharing thread to the shared session


def run_writers(store: SessionStore, workload: Workload) -> tuple[str, str, list[Writer]]:
    """Run ``workload`` on ``store`` (all threads started together); returns the shared session's
    id, its root entry's id, and each thread's :class:`Writer`."""
    first = store.create("/threads/shared")
    root = first.append_message({"role": "user", "content": "shared root"})
    shared_id = first.get_session_id()
    writers = [Writer(i) for i in range(workload.threads)]
    start = threading.Barrier(workload.threads)

    def work(writer: Writer) -> None:
        try:
            start.wait(timeout=60)
            own = store.create(f"/threads/{writer.index}")
            writer.own_id = own.get_session_id()
            shared = store.open(shared_id) if writer.index < workload.sharing else None
            for k in range(workload.singles):
                writer.own_ids.append(own.append_message({"role": "user", "content": f"own {writer.index} {k}"}))
                if shared is not None and k < workload.shared:
                    writer.shared_ids.append(_append_shared(shared, writer, k))
                if k % 4 == 0:  # readers between the writes, on the same store
                    store.list_all(limit=5)
                    store.open(writer.own_id).get_branch()
                    store.search(f"own {writer.index}")
                    run_sql(store.engine, "SELECT count(*) FROM entries")
            with own.batch():
                for k in range(workload.batch):
                    writer.own_ids.append(
                        own.append_message(
                            {"role": "assistant", "content": [{"type": "text", "text": f"batched {writer.index} {k}"}]}
                        )
                    )
        except BaseException as exc:  # reported by the test, with the thread it happened in
            writer.error = exc

    threads = [threading.Thread(target=work, args=(w,), name=f"writer-{w.index}") for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a writer thread is still running after 300 s"
    return shared_id, root, writers


def _append_shared(shared, writer: Writer, k: int) -> str:
    """Append to the shared session under its newest entry; a stale view is refreshed, then again."""
    while True:
        try:
            return shared.append_message({"role": "user", "content": f"shared {writer.index} {k}"})
        except SessionChanged:
            writer.conflicts[shared.get_session_id()] += 1
            shared.refresh()


def check_writers(store: SessionStore, workload: Workload, shared_id: str, root: str, writers: list[Writer]) -> int:
    """Every acknowledged append stored exactly once, in the session it was made in, each tree a
    single path; conflicts only on the shared session. Returns the number of conflicts."""
    for writer in writers:
        assert writer.error is None, f"writer {writer.index}: {type(writer.error).__name__}: {writer.error}"
        assert set(writer.conflicts) <= {shared_id}, writer.conflicts
        own = store.open(writer.own_id)
        assert own.get_branch_ids() == writer.own_ids
        assert len(writer.own_ids) == workload.singles + workload.batch
        assert [e["id"] for e in own.get_entries()] == writer.own_ids
    shared = store.open(shared_id)
    acknowledged = [i for w in writers for i in w.shared_ids]
    assert len(acknowledged) == workload.sharing * workload.shared
    stored = [e["id"] for e in shared.get_entries()]
    assert sorted(stored) == sorted([root, *acknowledged])  # each exactly once, nothing else
    assert shared.get_branch_ids() == stored  # every append under the newest entry: one path
    for writer in writers:  # each thread's own appends in the order it made them
        assert [i for i in stored if i in set(writer.shared_ids)] == writer.shared_ids
    return sum(sum(w.conflicts.values()) for w in writers)
