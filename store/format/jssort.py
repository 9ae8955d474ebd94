"""``Array.prototype.sort(comparefn)`` as V8 runs it, comparison by comparison.

Pi sorts a tree node's children with ``(a, b) => new Date(a.timestamp) - new Date(b.timestamp)``.
Where a timestamp is no date the comparison is NaN, which the sort takes as 0 ("equal") — an
inconsistent order, so the result depends on exactly which pairs the algorithm compares. With
consistent comparisons every stable sort agrees and Python's own does the work; otherwise
:func:`v8_sort` replays V8's TimSort (Torque's ``array-sort.tq``, itself a port of CPython's
``listsort``): natural runs (a strictly descending one reversed), runs shorter than the minimum
run length extended by binary insertion, the run stack kept balanced by merges that gallop once
one side keeps winning — with the comparisons in V8's argument order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["v8_sort"]

Compare = Callable[[Any, Any], "float | None"]  # None: NaN

_MIN_GALLOP = 7  # consecutive wins of one run before merging gallops


def v8_sort(items: list, compare: Compare) -> list:
    """The items in the order ``items.sort(compare)`` leaves them in V8; ``compare`` returns a
    number, or None for NaN (which V8 reads as 0)."""
    if len(items) < 2:
        return list(items)
    if all(compare(items[0], item) is not None for item in items):
        # every comparison defined (true of Pi's timestamp order: NaN only from a bad timestamp)
        return sorted(items, key=functools.cmp_to_key(lambda a, b: _sign(compare(a, b))))
    work = list(items)
    _TimSort(work, compare).sort()
    return work


def _sign(order: float | None) -> int:
    return 0 if not order else (-1 if order < 0 else 1)


def _min_run(n: int) -> int:
    """``n`` below 64; else a length in 32..64 that splits ``n`` into close to a power of two runs."""
    low_bits = 0
    while n >= 64:
        low_bits |= n & 1
        n >>= 1
    return n + low_bits


class _TimSort:
    """One sort of ``work`` in place (V8's ``SortState``: the runs waiting to be merged and the
    current galloping threshold)."""

    def __init__(self, work: list, compare: Compare) -> None:
        self.work = work
        self.compare = compare
        self.min_gallop = _MIN_GALLOP
        self.runs: list[list[int]] = []  # [base, length] of each pending run

    def order(self, x: Any, y: Any) -> float:
        value = self.compare(x, y)
        return 0 if value is None else value

    def sort(self) -> None:
        remaining, low = len(self.work), 0
        min_run = _min_run(remaining)
        while remaining:
            length = self.count_run(low, low + remaining)
            if length < min_run:
                forced = min(min_run, remaining)
                self.binary_insertion(low, low + length, low + forced)
                length = forced
            self.runs.append([low, length])
            self.merge_collapse()
            low += length
            remaining -= length
        while len(self.runs) > 1:  # merge what is left, the shorter neighbour first
            n = len(self.runs) - 2
            if n > 0 and self.runs[n - 1][1] < self.runs[n + 1][1]:
                n -= 1
            self.merge_at(n)

    def binary_insertion(self, low: int, start: int, high: int) -> None:
        """Sort ``[low, high)`` whose ``[low, start)`` is sorted, inserting each item after its equals."""
        work = self.work
        for index in range(start + 1 if start == low else start, high):
            pivot = work[index]
            left, right = low, index
            while left < right:
                middle = left + ((right - left) >> 1)
                if self.order(pivot, work[middle]) < 0:
                    right = middle
                else:
                    left = middle + 1
            work[left + 1:index + 1] = work[left:index]
            work[left] = pivot

    def count_run(self, low: int, high: int) -> int:
        """Length of the run at ``low``: ascending (``<=``) or strictly descending, then reversed."""
        work = self.work
        if low + 1 == high:
            return 1
        descending = self.order(work[low + 1], work[low]) < 0
        length, previous = 2, work[low + 1]
        for index in range(low + 2, high):
            current = work[index]
            order = self.order(current, previous)
            if (order >= 0) if descending else (order < 0):
                break
            previous = current
            length += 1
        if descending:
            work[low:low + length] = work[low:low + length][::-1]
        return length

    def merge_collapse(self) -> None:
        """Merge until each run is longer than the next one, and than the next two together."""
        runs = self.runs
        while len(runs) > 1:
            n = len(runs) - 2
            if not self._balanced(n + 1) or not self._balanced(n):
                if runs[n - 1][1] < runs[n + 1][1]:
                    n -= 1
                self.merge_at(n)
            elif runs[n][1] <= runs[n + 1][1]:
                self.merge_at(n)
            else:
                break

    def _balanced(self, n: int) -> bool:
        runs = self.runs
        return n < 2 or runs[n - 2][1] > runs[n - 1][1] + runs[n][1]

    def merge_at(self, i: int) -> None:
        """Merge pending runs ``i`` and ``i + 1``."""
        work, runs = self.work, self.runs
        base_a, length_a = runs[i]
        base_b, length_b = runs[i + 1]
        runs[i] = [base_a, length_a + length_b]
        del runs[i + 1]
        skipped = self.gallop_right(work, work[base_b], base_a, length_a, 0)  # A's head already in place
        base_a, length_a = base_a + skipped, length_a - skipped
        if length_a == 0:
            return
        length_b = self.gallop_left(work, work[base_a + length_a - 1], base_b, length_b, length_b - 1)
        if length_b == 0:  # B's tail already in place
            return
        if length_a <= length_b:
            self.merge_low(base_a, length_a, base_b, length_b)
        else:
            self.merge_high(base_a, length_a, base_b, length_b)

    def gallop_left(self, items: list, key: Any, base: int, length: int, hint: int) -> int:
        """Where ``key`` goes in the sorted ``items[base:base + length]``: before its equals."""
        last, offset = 0, 1
        if self.order(items[base + hint], key) < 0:  # gallop right from the hint
            limit = length - hint
            while offset < limit and self.order(items[base + hint + offset], key) < 0:
                last, offset = offset, (offset << 1) + 1
            offset = min(offset, limit)
            last, offset = last + hint, offset + hint
        else:  # gallop left from the hint
            limit = hint + 1
            while offset < limit and self.order(items[base + hint - offset], key) >= 0:
                last, offset = offset, (offset << 1) + 1
            offset = min(offset, limit)
            last, offset = hint - offset, hint - last
        last += 1
        while last < offset:
            middle = last + ((offset - last) >> 1)
            if self.order(items[base + middle], key) < 0:
                last = middle + 1
            else:
                offset = middle
        return offset

    def gallop_right(self, items: list, key: Any, base: int, length: int, hint: int) -> int:
        """Where ``key`` goes in the sorted ``items[base:base + length]``: after its equals."""
        last, offset = 0, 1
        if self.order(key, items[base + hint]) < 0:  # gallop left from the hint
            limit = hint + 1
            while offset < limit and self.order(key, items[base + hint - offset]) < 0:
                last, offset = offset, (offset << 1) + 1
            offset = min(offset, limit)
            last, offset = hint - offset, hint - last
        else:  # gallop right from the hint
            limit = length - hint
            while offset < limit and self.order(key, items[base + hint + offset]) >= 0:
                last, offset = offset, (offset << 1) + 1
            offset = min(offset, limit)
            last, offset = last + hint, offset + hint
        last += 1
        while last < offset:
            middle = last + ((offset - last) >> 1)
            if self.order(key, items[base + middle]) < 0:
                offset = middle
            else:
                last = middle + 1
        return offset

    def merge_low(self, base_a: int, length_a: int, base_b: int, length_b: int) -> None:
        """Merge forwards, run A (the shorter) copied aside."""
        work = self.work
        temp = work[base_a:base_a + length_a]
        dest, cursor_a, cursor_b = base_a, 0, base_b
        work[dest] = work[cursor_b]
        dest, cursor_b, length_b = dest + 1, cursor_b + 1, length_b - 1
        end = "done" if length_b == 0 else "last of a" if length_a == 1 else None
        min_gallop = self.min_gallop
        while end is None:
            wins_a = wins_b = 0
            while True:  # one at a time, until one run keeps winning
                if self.order(work[cursor_b], temp[cursor_a]) < 0:
                    work[dest] = work[cursor_b]
                    dest, cursor_b, length_b = dest + 1, cursor_b + 1, length_b - 1
                    wins_a, wins_b = 0, wins_b + 1
                    if length_b == 0:
                        end = "done"
                    elif wins_b < min_gallop:
                        continue
                else:
                    work[dest] = temp[cursor_a]
                    dest, cursor_a, length_a = dest + 1, cursor_a + 1, length_a - 1
                    wins_a, wins_b = wins_a + 1, 0
                    if length_a == 1:
                        end = "last of a"
                    elif wins_a < min_gallop:
                        continue
                break
            if end is not None:
                break
            min_gallop += 1
            first = True
            while first or wins_a >= _MIN_GALLOP or wins_b >= _MIN_GALLOP:  # galloping
                first = False
                min_gallop = max(1, min_gallop - 1)
                self.min_gallop = min_gallop
                wins_a = self.gallop_right(temp, work[cursor_b], cursor_a, length_a, 0)
                if wins_a:
                    work[dest:dest + wins_a] = temp[cursor_a:cursor_a + wins_a]
                    dest, cursor_a, length_a = dest + wins_a, cursor_a + wins_a, length_a - wins_a
                    if length_a == 1:
                        end = "last of a"
                        break
                    if length_a == 0:  # only with inconsistent comparisons
                        end = "done"
                        break
                work[dest] = work[cursor_b]
                dest, cursor_b, length_b = dest + 1, cursor_b + 1, length_b - 1
                if length_b == 0:
                    end = "done"
                    break
                wins_b = self.gallop_left(work, temp[cursor_a], cursor_b, length_b, 0)
                if wins_b:
                    work[dest:dest + wins_b] = work[cursor_b:cursor_b + wins_b]
                    dest, cursor_b, length_b = dest + wins_b, cursor_b + wins_b, length_b - wins_b
                    if length_b == 0:
                        end = "done"
                        break
                work[dest] = temp[cursor_a]
                dest, cursor_a, length_a = dest + 1, cursor_a + 1, length_a - 1
                if length_a == 1:
                    end = "last of a"
                    break
            if end is not None:
                break
            min_gallop += 1  # leaving galloping mode costs
            self.min_gallop = min_gallop
        if end == "done":
            work[dest:dest + length_a] = temp[cursor_a:cursor_a + length_a]
        else:  # A's last item belongs after the rest of B
            work[dest:dest + length_b] = work[cursor_b:cursor_b + length_b]
            work[dest + length_b] = temp[cursor_a]

    def merge_high(self, base_a: int, length_a: int, base_b: int, length_b: int) -> None:
        """Merge backwards, run B (the shorter) copied aside."""
        work = self.work
        temp = work[base_b:base_b + length_b]
        dest, cursor_b, cursor_a = base_b + length_b - 1, length_b - 1, base_a + length_a - 1
        work[dest] = work[cursor_a]
        dest, cursor_a, length_a = dest - 1, cursor_a - 1, length_a - 1
        end = "done" if length_a == 0 else "first of b" if length_b == 1 else None
        min_gallop = self.min_gallop
        while end is None:
            wins_a = wins_b = 0
            while True:  # one at a time, until one run keeps winning
                if self.order(temp[cursor_b], work[cursor_a]) < 0:
                    work[dest] = work[cursor_a]
                    dest, cursor_a, length_a = dest - 1, cursor_a - 1, length_a - 1
                    wins_a, wins_b = wins_a + 1, 0
                    if length_a == 0:
                        end = "done"
                    elif wins_a < min_gallop:
                        continue
                else:
                    work[dest] = temp[cursor_b]
                    dest, cursor_b, length_b = dest - 1, cursor_b - 1, length_b - 1
                    wins_a, wins_b = 0, wins_b + 1
                    if length_b == 1:
                        end = "first of b"
                    elif wins_b < min_gallop:
                        continue
                break
            if end is not None:
                break
            min_gallop += 1
            first = True
            while first or wins_a >= _MIN_GALLOP or wins_b >= _MIN_GALLOP:  # galloping
                first = False
                min_gallop = max(1, min_gallop - 1)
                self.min_gallop = min_gallop
                wins_a = length_a - self.gallop_right(work, temp[cursor_b], base_a, length_a, length_a - 1)
                if wins_a:
                    dest, cursor_a = dest - wins_a, cursor_a - wins_a
                    work[dest + 1:dest + 1 + wins_a] = work[cursor_a + 1:cursor_a + 1 + wins_a]
                    length_a -= wins_a
                    if length_a == 0:
                        end = "done"
                        break
                work[dest] = temp[cursor_b]
                dest, cursor_b, length_b = dest - 1, cursor_b - 1, length_b - 1
                if length_b == 1:
                    end = "first of b"
                    break
                wins_b = length_b - self.gallop_left(temp, work[cursor_a], 0, length_b, length_b - 1)
                if wins_b:
                    dest, cursor_b = dest - wins_b, cursor_b - wins_b
                    work[dest + 1:dest + 1 + wins_b] = temp[cursor_b + 1:cursor_b + 1 + wins_b]
                    length_b -= wins_b
                    if length_b == 1:
                        end = "first of b"
                        break
                    if length_b == 0:  # only with inconsistent comparisons
                        end = "done"
                        break
                work[dest] = work[cursor_a]
                dest, cursor_a, length_a = dest - 1, cursor_a - 1, length_a - 1
                if length_a == 0:
                    end = "done"
                    break
            if end is not None:
                break
            min_gallop += 1  # leaving galloping mode costs
            self.min_gallop = min_gallop
        if end == "done":
            work[dest - length_b + 1:dest + 1] = temp[:length_b]
        else:  # B's first item belongs before the rest of A
            dest, cursor_a = dest - length_a, cursor_a - length_a
            work[dest + 1:dest + 1 + length_a] = work[cursor_a + 1:cursor_a + 1 + length_a]
            work[dest] = temp[cursor_b]
