"""``Array.prototype.sort`` as V8 runs it (store.format.jssort), against Node's own orders.

Pi sorts a node's children by timestamp; a timestamp that is no date makes comparisons NaN,
which V8 reads as "equal", so the order is whatever V8's TimSort does with them. The golden file
tests/fixtures/dates/v8_sibling_orders.json.gz holds 200 lists (53,966 timestamps; 1 to 1,500 a
list) drawn by tools/sort_differential.py (seed 20261207) and the order the oracle's Node left
each in. The live test asks that Node about fresh lists; it skips when the oracle is not installed.
"""

import gzip
import json
from pathlib import Path

import pytest

from store.format.jssort import v8_sort
from tests.oracle_support import ORACLE_NODE, ORACLE_SKIP_REASON, oracle_available
from tools.sort_differential import node_orders, ours, timestamps

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "dates" / "v8_sibling_orders.json.gz"


def _golden() -> list[tuple[list, list[int]]]:
    document = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    return [(stamps, order) for stamps, order in document["cases"]]


def test_two_hundred_lists_sort_as_node_sorts_them() -> None:
    cases = _golden()
    assert len(cases) == 200 and sum(len(stamps) >= 64 for stamps, _ in cases) > 80  # merges happen
    assert sum(any(s is None or s in ("", "bad") for s in stamps) for stamps, _ in cases) > 100
    wrong = [index for index, (stamps, order) in enumerate(cases) if ours(stamps) != order]
    assert wrong == []


def test_the_lists_are_the_generators() -> None:
    assert [stamps for stamps, _ in _golden()] == [timestamps("20261207", index) for index in range(200)]


def test_a_nan_comparison_ends_a_descending_run() -> None:
    """V8 reads NaN as 0, and a descending run ends at the first comparison that is not < 0: here
    after two items, then binary insertion places the rest (Node: [3, 1, 0, 2]; read as "not
    >= 0", NaN had let the run take all four: [3, 2, 1, 0])."""
    times = [3.0, 2.0, None, 1.0]

    def compare(a: int, b: int) -> float | None:
        return None if times[a] is None or times[b] is None else times[a] - times[b]

    assert v8_sort([0, 1, 2, 3], compare) == [3, 1, 0, 2]


@pytest.mark.oracle
@pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)
def test_fresh_lists_sort_as_the_live_node_sorts_them() -> None:
    cases = [timestamps("live", index) for index in range(300)]
    orders = node_orders(ORACLE_NODE, cases)
    assert [index for index, stamps in enumerate(cases) if ours(stamps) != orders[index]] == []
