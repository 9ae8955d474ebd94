"""CSV as the CLI writes it: ``\\n`` line ends, and records that every CSV reader reads back."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from typing import TextIO


class CsvWriter:
    """``csv.writer`` with ``\\n`` line ends that also quotes a field holding ``\\r``: the csv
    module quotes only its line terminator's characters, and a bare carriage return split the
    record for every reader. Such a row is written with every field quoted."""

    def __init__(self, out: TextIO) -> None:
        self.minimal = csv.writer(out, lineterminator="\n")
        self.quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def writerow(self, cells: Sequence[str]) -> None:
        (self.quoted if any("\r" in cell for cell in cells) else self.minimal).writerow(cells)
