"""The output formats every row-printing command shares (``list``, ``search``, ``sql``, ``stats``,
``tree``): ``--json``, ``--nl``, ``--csv``, ``--tsv``, ``--table``, and the default.

* ``--json``: one JSON document, always the same shape for a command (a list of row objects for
  ``list``, ``search``, ``sql``; ``stats`` and ``tree`` give their one document);
* ``--nl``: one JSON object per line (the same objects), for ``jq -c`` and streaming;
* ``--csv`` / ``--tsv``: a header row, then one row per object with the command's scalar columns;
* ``--table``: an aligned table sized to the terminal, drawn by ``rich``;
* no option: the table on a terminal; piped, the command's plain lines, whose layout is stable
  (scripts parse it: fields separated by two spaces, one record per line).

Colour follows ``rich`` (off when piped, or with ``NO_COLOR``). ``rich`` is imported only when a
table or colour is drawn, so piped commands do not pay for it.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import click

from store.delimited import CsvWriter
from store.visible_text import one_line, visible

FORMATS = ("json", "nl", "csv", "tsv", "table")


@dataclass(frozen=True)
class Column:
    """A column: the row object's ``key``; ``text`` renders its table cell (CSV/TSV print the
    value itself); ``table``/``delimited``: whether the table or CSV/TSV show it. In the table a
    long cell is folded onto more lines (``fold``), or kept whole on one line; a ``one_line``
    column gives up its width first when the terminal is narrow, its cells cut with …."""

    key: str
    header: str
    numeric: bool = False
    text: Callable[[Any], str] | None = None
    table: bool = True
    delimited: bool = True
    fold: bool = True
    one_line: bool = False

    def cell(self, row: dict, *, shown: bool = False) -> str:
        value = row.get(self.key)
        if shown and self.text is not None:
            return self.text(value)
        if isinstance(value, str):
            return value
        from store.analysis.readonly import cell_text  # here: this module loads with every command

        return cell_text(value)  # as sql --csv writes a cell: NULL empty, numbers as JavaScript does


def format_options(json_help: str) -> Callable:
    """The ``--json/--nl/--csv/--tsv/--table`` switches, as one parameter ``fmt`` (None: default)."""
    def decorate(command: Callable) -> Callable:
        switches = [("--table", "table", "An aligned table sized to the terminal (the default on a terminal)."),
                    ("--tsv", "tsv", "Tab-separated values with a header row."),
                    ("--csv", "csv", "CSV with a header row."),
                    ("--nl", "nl", "One JSON object per line."),
                    ("--json", "json", json_help)]
        for flag, value, text in switches:
            command = click.option(flag, "fmt", flag_value=value, default=None, help=text)(command)
        return command
    return decorate


def resolve(fmt: str | None) -> str:
    """The format to print: the one asked for, else ``table`` on a terminal and ``plain`` piped."""
    if fmt is not None:
        return fmt
    return "table" if sys.stdout.isatty() else "plain"


def console() -> Any:
    """A ``rich`` console on stdout (colour and width from the terminal; ``NO_COLOR`` honoured)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def write_delimited(columns: Sequence[Column], rows: Iterable[dict], delimiter: str) -> None:
    """CSV (``,``) or TSV (tab: tabs and newlines in cells become spaces) with a header row."""
    tsv = delimiter != ","
    writer = (csv.writer(sys.stdout, delimiter=delimiter, lineterminator="\n", quoting=csv.QUOTE_NONE, quotechar=None)
              if tsv else CsvWriter(sys.stdout))
    columns = [c for c in columns if c.delimited]
    writer.writerow([c.key for c in columns])
    for row in rows:
        cells = [c.cell(row) for c in columns]
        if tsv:
            cells = [" ".join(cell.split()) if any(ch in cell for ch in "\t\r\n") else cell for cell in cells]
        writer.writerow(cells)


def write_nl(rows: Iterable[dict]) -> None:
    from store.format.jsjson import js_stringify

    for row in rows:
        sys.stdout.write(js_stringify(row) + "\n")


def write_json_list(rows: Iterable[dict]) -> None:
    """A JSON list, one object written at a time."""
    from store.format.jsjson import js_stringify

    sys.stdout.write("[")
    for i, row in enumerate(rows):
        sys.stdout.write(("," if i else "") + js_stringify(row))
    sys.stdout.write("]\n")


def write_table(columns: Sequence[Column], rows: Iterable[dict], *, title: str | None = None,
                styles: dict[str, Callable[[dict], Any]] | None = None) -> None:
    """The rows as a ``rich`` table fitted to the terminal (long cells folded or cut with …).
    ``styles`` give a column's cell as rich text instead (e.g. search matches highlighted)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, header_style="bold", box=None, pad_edge=False, expand=False)
    columns = [c for c in columns if c.table]
    for column in columns:
        # rich narrows the columns that may wrap first: a one-line column is one, its cells are not
        table.add_column(column.header, justify="right" if column.numeric else "left",
                         overflow="fold" if column.fold and not column.one_line else "ellipsis",
                         no_wrap=not (column.fold or column.one_line))
    for row in rows:  # cells as Text: a plain string would be read as rich markup ("[red]", "[/]")
        table.add_row(*(styles[c.key](row) if styles and c.key in styles
                        else Text(visible(c.cell(row, shown=True)), no_wrap=True, overflow="ellipsis")
                        if c.one_line else Text(visible(c.cell(row, shown=True))) for c in columns))
    console().print(table)


def write_rows(fmt: str, columns: Sequence[Column], rows: Iterable[dict], plain: Callable[[dict], str], *,
               styles: dict[str, Callable[[dict], Any]] | None = None) -> None:
    """Print ``rows`` (JSON-ready objects) in ``fmt`` (see :func:`resolve`): ``plain`` gives the
    piped default's line for a row."""
    if fmt == "json":
        write_json_list(rows)
    elif fmt == "nl":
        write_nl(rows)
    elif fmt in ("csv", "tsv"):
        write_delimited(columns, rows, "," if fmt == "csv" else "\t")
    elif fmt == "table":
        write_table(columns, rows, styles=styles)
    else:
        for row in rows:  # one record a line, whatever its text holds
            click.echo(one_line(plain(row)))


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``1,234 entries`` (``plural_form`` when not noun + s)."""
    return f"{count:,} {noun if count == 1 else plural_form or noun + 's'}"
