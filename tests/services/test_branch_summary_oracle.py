"""Branch-summary preparation against the live Pi (skipped with a reason when it is not installed).

describe.mjs does not cover branch summaries, so ``branch_oracle.mjs`` (next to this file) runs
Pi's own ``collectEntriesForBranchSummary`` and ``prepareBranchEntries`` for every pair (leaf,
any entry) of a few committed sessions; we compare entries, common ancestor, messages, token
totals and file operations.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from store.services import collect_entries_for_branch_summary, jsonable, prepare_branch_entries
from tests.oracle_support import (
    FIXTURES,
    ORACLE_DIR,
    ORACLE_SKIP_REASON,
    RUN_SH,
    js_diff,
    load_fixture_cases,
    oracle_available,
)
from tests.services.oracle_compare import get_branch, id_of, index_by_id

SCRIPT = Path(__file__).with_name("branch_oracle.mjs")
BUDGETS = ("0", "300", "2000")
NAMES = ("small-seed1-0", "small-seed2-0", "small-seed3-0", "small-seed7-0", "small-seed13-0",
         "edge-null-content", "edge-duplicate-ids", "edge-compaction-dangling", "legacy-v2-hookmessage")
# (v1 files are left out: outside describe.mjs, Pi gives migrated entries random ids)
CASES = [case for case in load_fixture_cases() if case.name in NAMES]

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON or "oracle unavailable")]


def _run_oracle(path: Path) -> dict:
    result = subprocess.run([str(RUN_SH), str(SCRIPT), str(path), *BUDGETS], capture_output=True, timeout=300,
                            env={**os.environ, "PI_ORACLE_DIR": str(ORACLE_DIR)}, check=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_branch_preparation_matches_pi(case) -> None:
    assert case.jsonl is not None and case.jsonl.is_relative_to(FIXTURES)
    oracle = _run_oracle(case.jsonl)
    assert "error" not in oracle, oracle.get("error")
    entries = case.describe["entries"]
    by_id = index_by_id(entries)
    problems = []
    for pair in oracle["pairs"]:
        old_path = get_branch(by_id, pair["old"])
        target_path = get_branch(by_id, pair["target"])
        collected, common = collect_entries_for_branch_summary(old_path, target_path)
        where = f"{pair['old']}->{pair['target']}"
        if [id_of(e) for e in collected] != pair["entryIds"] or common != pair["commonAncestorId"]:
            problems.append(f"{where}: collected {[id_of(e) for e in collected]} != {pair['entryIds']}")
            continue
        for budget in BUDGETS:
            expected = pair["prepared"][budget]
            if "$error" in expected:  # Pi throws on this branch: so must we
                with pytest.raises(TypeError):
                    prepare_branch_entries(collected, int(budget))
                continue
            prepared = prepare_branch_entries(collected, int(budget))
            ours = {"messages": jsonable(prepared.messages), "totalTokens": jsonable(prepared.total_tokens),
                    "fileOps": {"read": list(prepared.file_ops.read), "edited": list(prepared.file_ops.edited),
                                "written": list(prepared.file_ops.written)}}
            diff = js_diff(expected, ours, f"{where}[{budget}]")
            if diff:
                problems.append(diff)
    assert oracle["pairs"], "the oracle compared no pairs"
    assert not problems, f"{len(problems)}/{len(oracle['pairs']) * len(BUDGETS)} differ:\n" + "\n".join(problems[:10])
