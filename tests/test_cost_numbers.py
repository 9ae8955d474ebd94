"""One number for a session's cost on every surface and engine (the rule: ``store.money``).

``list --json``, ``stats --json`` and ``SessionStore.find_by_id`` give the same cost and tokens
for each session, on SQLite and PostgreSQL alike: over the oracle fixture sessions, and over a
crafted session of many small costs whose sum depends on the order it is added in.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner

from store import SessionStore
from store.cli import main
from store.money import reported_cost

FIXTURES = Path(__file__).parent / "fixtures" / "oracle" / "sessions"
SMALL_COST = 0.1  # ten of them add up to 0.9999999999999999 in order, 1.0 exactly


def _crafted(folder: Path) -> Path:
    """A session of 1,000 assistant messages costing 0.1 (and 10 tokens) each."""
    lines = [{"type": "session", "version": 3, "id": "0190c0de-0000-7000-8000-000000000001",
              "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/crafted"}]
    parent = None
    for index in range(1000):
        entry_id = f"{index:08x}"
        message = {"role": "assistant", "content": [{"type": "text", "text": f"reply {index}"}],
                   "provider": "p", "model": "m", "timestamp": 1767225600000 + index,
                   "usage": {"input": 4, "output": 6, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 10,
                             "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0, "cacheWrite": 0,
                                      "total": SMALL_COST}}}
        lines.append({"type": "message", "id": entry_id, "parentId": parent,
                      "timestamp": "2026-01-01T00:00:01.000Z", "message": message})
        parent = entry_id
    path = folder / "crafted.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _cli_json(db_url: str, *args: str) -> object:
    result = CliRunner().invoke(main, ["--db", db_url, *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_surface_gives_one_cost(db_url: str, tmp_path: Path) -> None:
    crafted = _crafted(tmp_path)
    in_order = 0.0
    for _ in range(1000):
        in_order += SMALL_COST
    assert in_order != math.fsum([SMALL_COST] * 1000)  # the sum's last digits depend on its order
    with SessionStore.connect(db_url) as store:
        store.import_path(*sorted(FIXTURES.glob("*.jsonl")), crafted)
        infos = {info.id: store.find_by_id(info.id) for info in store.list_all()}
    listed = {row["id"]: row for row in _cli_json(db_url, "list")}
    assert listed.keys() == infos.keys()
    assert len(listed) >= 50
    costly = 0
    for session_id, row in listed.items():
        stats = _cli_json(db_url, "stats", session_id)
        numbers = {(row["cost"], row["tokens"]), (stats["cost"], stats["tokens"]["total"]),
                   (infos[session_id].cost, infos[session_id].tokens)}
        assert len(numbers) == 1, (session_id, numbers)
        assert row["cost"] == reported_cost(row["cost"])
        costly += row["cost"] > 0
    assert costly >= 40
    assert listed["0190c0de-0000-7000-8000-000000000001"]["cost"] == 100.0
    assert listed["0190c0de-0000-7000-8000-000000000001"]["tokens"] == 10_000
    everything = _cli_json(db_url, "stats")
    assert everything["cost"] == reported_cost(everything["cost"])
    assert math.isclose(everything["cost"], math.fsum(row["cost"] for row in listed.values()), abs_tol=1e-8)
