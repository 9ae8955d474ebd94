"""One ``SessionStore`` shared by threads (a server's request handlers): eight threads append to
sessions of their own and four of them also to one they share, with reads in between, on both
engines. No acknowledged append is lost or stored twice, every tree stays one path, and the only
errors are ``SessionChanged`` on the shared session (refreshed and retried)."""

from __future__ import annotations

from store.session_store import SessionStore
from tests.writers_support import Workload, check_writers, run_writers


def test_threads_share_one_store(db_url: str) -> None:
    workload = Workload()
    with SessionStore.connect(db_url) as store:
        shared_id, root, writers = run_writers(store, workload)
        conflicts = check_writers(store, workload, shared_id, root, writers)
        assert store.find_by_id(shared_id).message_count == 1 + workload.sharing * workload.shared
    print(f"{store.engine.dialect.name}: {conflicts} SessionChanged on the shared session, all retried")
