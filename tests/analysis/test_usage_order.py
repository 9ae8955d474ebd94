"""Rows of equal cost (or count) come out in the same order on both engines: no model's
provider first, then code point order. PostgreSQL put NULL last and followed the database's
collation ("a-model" before "B-model" under ICU), so ``stats`` and the viewer's "main model"
differed between a SQLite and a PostgreSQL store of the same history."""

from __future__ import annotations

from store.analysis.usage import main_models, usage_by_day
from store.db.engine import read_transaction
from store.session_store import SessionStore


def _assistant(provider: str, model: str, cost: float, ts: int) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": "a"}], "provider": provider, "model": model,
            "api": "x", "stopReason": "stop", "timestamp": ts,
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost}}}


def test_ties_are_ordered_alike_on_both_engines(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_message({"role": "user", "content": "q", "timestamp": 1})
    for provider, model in (("p", "b-model"), ("p", "a-model"), ("p", "B-model"), ("", "m")):
        sm.append_message(_assistant(provider, model, 0.5, 2))
    expected = [(None, "m"), ("p", "B-model"), ("p", "a-model"), ("p", "b-model")]
    for stats in (store.stats(sm.session_id), store.stats()):
        assert [(m.provider, m.model) for m in stats.models] == expected
    with read_transaction(store.engine) as conn:
        assert [(u.provider, u.model) for u in usage_by_day(conn)] == expected
        assert main_models(conn, [sm.session_id]) == {sm.session_id: "p/b-model"}  # ties: the last in that order
