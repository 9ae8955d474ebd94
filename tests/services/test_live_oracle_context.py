"""Fresh gen.mjs sessions described by the live Pi, compared like the committed fixtures.

Skipped (with the reason) when the oracle is not installed. Seeds: ``PI_STORE_LIVE_SEEDS``
("201-205" by default; e.g. "1-200" for a long run), size ``PI_STORE_LIVE_SIZE`` (small).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.oracle_support import ORACLE_SKIP_REASON, oracle_available, run_describe, run_gen
from tests.services.oracle_compare import LEAF_FIELDS, MAIN_FIELDS, index_by_id, leaf_doc, main_leaf_doc, path_from_ids
from tests.services.test_oracle_context import _judge, _judge_prepare


def _seeds() -> list[int]:
    spec = os.environ.get("PI_STORE_LIVE_SEEDS", "201-205")
    seeds: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


SIZE = os.environ.get("PI_STORE_LIVE_SIZE", "small")

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON or "oracle unavailable")]


@pytest.mark.parametrize("seed", _seeds())
def test_fresh_seed_matches_pi(seed: int, tmp_path: Path) -> None:
    session = run_gen(seed, SIZE, tmp_path)
    doc = run_describe(session, all_leaves=SIZE == "small")
    assert doc["openError"] is None
    entries = doc["entries"]
    by_id = index_by_id(entries)
    where = f"live-{SIZE}-seed{seed}"
    problems: list[str] = []
    ours = main_leaf_doc(entries, path_from_ids(doc["branchIds"], by_id))
    for field in MAIN_FIELDS:
        if field == "prepareCompaction":
            problems += _judge_prepare(f"live.{field}", doc[field], ours[field], where)
        elif diff := _judge(f"live.{field}", doc[field], ours[field], where):
            problems.append(diff)
    for leaf in doc.get("allLeaves") or []:
        mine = leaf_doc(entries, leaf["leafId"], path_from_ids(leaf["pathIds"], by_id))
        for field in LEAF_FIELDS:
            if diff := _judge(f"live.allLeaves.{field}", leaf.get(field), mine.get(field), where):
                problems.append(f"{leaf['leafId']}: {diff}")
    assert not problems, "\n".join(problems[:10])
