"""The output formats of the row-printing commands, field by field, on SQLite and PostgreSQL,
through the real CLI; search syntax; ``pi-store tree``."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from store.cli import main
from tests.terminal import run_in_terminal, without_styles

SMALL = Path(__file__).resolve().parent / "fixtures" / "oracle" / "sessions" / "small-seed1-0.jsonl"
SESSION = "018da346-a275-7883-9492-51c39b129f0f"
LIST_KEYS = ["id", "cwd", "name", "parentSession", "created", "modified", "messageCount", "firstMessage", "tokens",
             "cost"]


def cli(db_url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--db", db_url, *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def imported(db_url: str) -> str:
    assert cli(db_url, "import", str(SMALL))[0] == 0
    return db_url


def test_list_formats(imported: str) -> None:
    code, out, _ = cli(imported, "list", "--json")
    (doc,) = json.loads(out)
    assert code == 0 and list(doc) == LIST_KEYS and doc["id"] == SESSION and doc["messageCount"] == 19
    assert [json.loads(line) for line in cli(imported, "list", "--nl")[1].splitlines()] == [doc]
    rows = list(csv.DictReader(io.StringIO(cli(imported, "list", "--csv")[1])))
    assert rows == [{"id": SESSION, "modified": doc["modified"], "created": doc["created"], "messageCount": "19",
                     "tokens": str(doc["tokens"]), "cost": str(doc["cost"]), "cwd": doc["cwd"], "name": "",
                     "parentSession": ""}]
    tsv = cli(imported, "list", "--tsv")[1].splitlines()
    assert tsv[0].split("\t") == list(rows[0]) and tsv[1].split("\t") == list(rows[0].values())
    plain = cli(imported, "list")[1]
    assert plain.startswith(f"{SESSION}  {doc['modified']}") and " 19 messages  $0.7814 " in plain
    table = cli(imported, "list", "--table")[1].splitlines()
    assert table[0].split()[:4] == ["session", "modified", "messages", "tokens"]


def test_list_json_is_a_list_with_limit_too(imported: str) -> None:
    assert cli(imported, "import", str(SMALL.with_name("small-seed2-0.jsonl")))[0] == 0
    code, out, err = cli(imported, "list", "--json", "--limit", "1")
    page = json.loads(out)
    assert code == 0 and isinstance(page, list) and len(page) == 1
    assert err.startswith("more: --cursor ")
    rest = json.loads(cli(imported, "list", "--json", "--cursor", err.split()[-1])[1])
    assert len(rest) == 1 and rest[0]["id"] != page[0]["id"]


def test_search_formats_and_syntax(imported: str) -> None:
    hits = json.loads(cli(imported, "search", "the", "--json")[1])
    assert hits and list(hits[0]) == ["entryId", "sessionId", "seq", "type", "role", "timestamp", "snippet",
                                      "provenance"]
    assert all("<mark>" in h["snippet"] for h in hits)
    nl = [json.loads(line) for line in cli(imported, "search", "the", "--nl")[1].splitlines()]
    assert nl == hits
    rows = list(csv.DictReader(io.StringIO(cli(imported, "search", "the", "--csv")[1])))
    assert [r["entryId"] for r in rows] == [h["entryId"] for h in hits] and "<mark>" in rows[0]["snippet"]
    plain = cli(imported, "search", "the")[1]
    assert "<mark>" not in plain and len(plain.splitlines()) == len(hits)
    every = {h["entryId"] for h in hits}
    without = {h["entryId"] for h in json.loads(cli(imported, "search", "the", "-branch", "--json")[1])}
    with_not = {h["entryId"] for h in json.loads(cli(imported, "search", "the", "NOT", "branch", "--json")[1])}
    both = {h["entryId"] for h in json.loads(cli(imported, "search", "the", "AND", "branch", "--json")[1])}
    assert without == with_not and without | both == every and not without & both and both
    assert cli(imported, "search", "zzzqqq") == (0, "", "no entries match 'zzzqqq'\n")
    assert cli(imported, "search", "zzzqqq", "--json")[1] == "[]\n"
    code, _, err = cli(imported, "search", "the", "NOT")
    assert code == 1 and err.count("\n") == 1 and err.startswith("Error: bad search query")
    assert cli(imported, "search", "x", "--role", "nope")[0] == 2
    assert cli(imported, "search", "x", "--nope")[0] == 2


def test_stats_formats(imported: str) -> None:
    doc = json.loads(cli(imported, "stats", SESSION, "--json")[1])
    assert doc["totalMessages"] == 19 and len(doc["models"]) == 2
    rows = list(csv.DictReader(io.StringIO(cli(imported, "stats", SESSION, "--csv")[1])))
    assert [r["records"] for r in rows] == [str(m["records"]) for m in doc["models"]]
    assert [float(r["cost"]) for r in rows] == [m["cost"] for m in doc["models"]]
    assert [json.loads(line)["tokensTotal"] for line in cli(imported, "stats", SESSION, "--nl")[1].splitlines()] \
        == [m["tokens"]["total"] for m in doc["models"]]
    assert "4 tool calls" in cli(imported, "stats", SESSION)[1]


def test_list_and_stats_give_the_same_numbers(imported: str) -> None:
    (listed,) = json.loads(cli(imported, "list", "--json")[1])
    stats = json.loads(cli(imported, "stats", SESSION, "--json")[1])
    assert listed["cost"] == stats["cost"] and listed["tokens"] == stats["tokens"]["total"]


def test_sql_formats(imported: str) -> None:
    query = "SELECT 1 AS a, 'x y' AS b"
    assert cli(imported, "sql", query, "--json")[1] == '[{"a":1,"b":"x y"}]\n'
    assert cli(imported, "sql", query, "--nl")[1] == '{"a":1,"b":"x y"}\n'
    assert cli(imported, "sql", query, "--csv")[1] == "a,b\n1,x y\n"
    assert cli(imported, "sql", query, "--tsv")[1] == "a\tb\n1\tx y\n"


def test_sql_numbers_read_the_same_in_every_format(imported: str) -> None:
    """Floats as JavaScript writes them in CSV, TSV and JSON alike (TSV had Python's ``1e-07``),
    and PostgreSQL's numeric Infinity and NaN as JSON's null (they were an OverflowError)."""
    query = "SELECT CAST(0.0000001 AS DOUBLE PRECISION) AS a, CAST(1e20 AS DOUBLE PRECISION) AS b"
    if imported.startswith("postgresql"):
        query += ", CAST('Infinity' AS numeric) AS c, CAST('NaN' AS numeric) AS d"
    expected = ["1e-7", "100000000000000000000"] + (["null", "null"] if imported.startswith("postgresql") else [])
    for fmt, sep in (("--csv", ","), ("--tsv", "\t")):
        code, out, err = cli(imported, "sql", query, fmt)
        assert code == 0 and out.splitlines()[1].split(sep) == expected, (fmt, out, err)
    code, out, _ = cli(imported, "sql", query, "--json")
    assert code == 0 and out == "[{" + ",".join(f'"{k}":{v}' for k, v in zip("abcd", expected, strict=False)) + "}]\n"


def test_tree(imported: str) -> None:
    roots = json.loads(cli(imported, "tree", SESSION, "--json")[1])
    full = json.loads(cli(imported, "tree", SESSION, "--json", "--full")[1])

    def walk(nodes: list) -> list:
        return [n for node in nodes for n in [node, *walk(node["children"])]]

    assert len(walk(full)) == 24 and not any(n["folded"] for n in walk(full))
    folded = [n for n in walk(roots) if n["folded"]]
    assert folded and sum(n["folded"] for n in folded) + len(walk(roots)) - len(folded) == 24
    (leaf,) = [n for n in walk(full) if n["leaf"]]
    assert leaf["onPath"] and leaf["kind"] == "compaction"
    rows = list(csv.DictReader(io.StringIO(cli(imported, "tree", SESSION, "--csv", "--full")[1])))
    assert [r["id"] for r in rows] == [n["id"] for n in walk(full)] and rows[0]["depth"] == "0"
    drawn = cli(imported, "tree", SESSION)[1]
    assert f"* {leaf['id']} compaction: " in drawn and "(--full shows them)" in drawn and "├─ " in drawn
    kinds = {"compaction", "branch_summary", "context_edit", "model_change", "thinking_level_change", "label"}
    shown = [n for n in walk(full) if n["kind"] in kinds]
    assert shown and not any(n["text"].startswith(n["kind"].split("_")[0]) for n in shown)  # said once, by kind
    assert not re.search(r"(\w+): \1:", cli(imported, "tree", SESSION, "--full")[1])


def test_search_phrase_prefix_or_on_both_engines(imported: str) -> None:
    def hits(*query: str) -> list[str]:
        code, out, err = cli(imported, "search", *query, "--json")
        assert code == 0, err
        return sorted(h["entryId"] for h in json.loads(out))

    branch = ["5b168d7d", "694ad2fb", "9b0b8495", "e958d8ba", "ee2b7d28", "efecc7d8"]
    assert hits("branch") == branch == hits("bran*") == hits("branch", "OR", "zzzqqq")
    assert hits('"the branch"') == ["e958d8ba"] and hits('"branch the"') == []
    assert hits("zzzqqq", "OR", "yyyxxx") == []


def test_search_tsv_and_the_terminal_table(imported: str) -> None:
    hits = json.loads(cli(imported, "search", "branch", "--json")[1])
    tsv = cli(imported, "search", "branch", "--tsv")[1].splitlines()
    header = ["entryId", "sessionId", "seq", "role", "type", "timestamp", "provenance", "snippet"]
    assert tsv[0].split("\t") == header and len(tsv) == len(hits) + 1
    for line, hit in zip(tsv[1:], hits, strict=True):
        cells = dict(zip(header, line.split("\t"), strict=True))
        assert cells["entryId"] == hit["entryId"] and cells["seq"] == str(hit["seq"])
        assert cells["sessionId"] == SESSION and cells["role"] == hit["role"] and cells["type"] == hit["type"]
        assert json.loads(cells["provenance"]) == hit["provenance"] and "<mark>branch</mark>" in cells["snippet"]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PI_STORE_DB")}
    code, shown = run_in_terminal([sys.executable, "-m", "store.cli", "--db", imported, "search", "branch"], env)
    text = without_styles(shown)
    assert code == 0 and "<mark>" not in text and text.split()[:3] == ["entry", "session", "role"]
    assert re.search(r"\x1b\[[0-9;]*m(\x1b\[[0-9;]*m)*branch\x1b\[0m", shown)  # the match is styled
    assert all(hit["entryId"] in text for hit in hits)


def test_list_on_a_terminal_is_a_table(imported: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PI_STORE_DB"}
    for columns in (100, 160):  # one line per session, cut to the terminal's width
        code, shown = run_in_terminal([sys.executable, "-m", "store.cli", "--db", imported, "list"], env,
                                      columns=columns)
        lines = without_styles(shown).splitlines()
        header = lines[0].split()
        assert code == 0 and len(lines) == 2 and header[:5] == ["session", "modified", "messages", "tokens", "cost"]
        assert lines[1].startswith(f"{SESSION}  ") and " 19 " in lines[1] and " $0.7814 " in lines[1]
        assert all(len(line) <= columns for line in lines)  # cwd and title give up their width first
    assert header[5:] == ["cwd", "title"] and lines[1].rstrip().endswith("/work/репо/проект  🧪 请修复这个问题")


def test_sql_aliased_columns_are_named_the_same_on_both_engines(imported: str) -> None:
    """(Unaliased expressions are named by each engine: ``sum(cost)`` on SQLite, ``sum`` on PostgreSQL.)"""
    query = "SELECT model, sum(cost) AS cost FROM usage_ledger GROUP BY model ORDER BY model"
    rows = json.loads(cli(imported, "sql", query, "--json")[1])
    assert [list(row) for row in rows] == [["model", "cost"]] * 2
    assert sorted((r["model"] or "", round(r["cost"], 8)) for r in rows) == [
        ("", 0.03369375), ("qwen/qwen3-coder", 0.74770575)]
    assert cli(imported, "sql", query, "--csv")[1].splitlines()[0] == "model,cost"


def test_stats_shapes(imported: str) -> None:
    doc = json.loads(cli(imported, "stats", SESSION, "--json")[1])
    assert list(doc) == ["sessionId", "sessions", "userMessages", "assistantMessages", "toolCalls", "toolResults",
                         "totalMessages", "tokens", "cost", "models"]
    assert (doc["userMessages"], doc["assistantMessages"], doc["toolCalls"], doc["toolResults"]) == (5, 8, 4, 4)
    assert doc["tokens"] == {"input": 177984, "output": 13149, "cacheRead": 6175, "cacheWrite": 12896, "total": 210204}
    assert doc["cost"] == 0.7813995
    header = ["provider", "model", "records", "tokensInput", "tokensOutput", "tokensCacheRead", "tokensCacheWrite",
              "tokensTotal", "cost"]
    tsv = [line.split("\t") for line in cli(imported, "stats", SESSION, "--tsv")[1].splitlines()]
    nl = [json.loads(line) for line in cli(imported, "stats", SESSION, "--nl")[1].splitlines()]
    assert tsv[0] == header and len(tsv) == len(nl) + 1 == len(doc["models"]) + 1
    for cells, row, model in zip(tsv[1:], nl, doc["models"], strict=True):
        expected = {"provider": model["provider"], "model": model["model"], "records": model["records"],
                    "cost": model["cost"], **{f"tokens{k[0].upper()}{k[1:]}": v for k, v in model["tokens"].items()}}
        assert row == expected
        assert cells == ["" if row[key] is None else str(row[key]) for key in header]


@pytest.mark.parametrize("args", [["search", "the", "--nl"], ["sql", "SELECT * FROM entries"], ["export", SESSION],
                                  ["export", "--all", "{tmp}"]])
def test_a_closed_pipe_ends_quietly(imported: str, args: list[str], tmp_path: Path) -> None:
    """(sql reported its reader leaving as the query's failure: "Error: [Errno 32] Broken pipe";
    export as "export failed: BrokenPipeError", exit 1.)"""
    args = [arg.format(tmp=tmp_path / "out") for arg in args]
    reader = subprocess.Popen([sys.executable, "-m", "store.cli", "--db", imported, *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.close()  # as `| head -0` would
    assert reader.wait(timeout=120) == 141
    assert reader.stderr.read() == b""


def test_a_lone_surrogate_is_printed_as_its_escape(tmp_path: Path, db_url: str) -> None:
    """JSON allows ``\\ud800``; UTF-8 cannot carry it: ``list`` piped (and --csv, stats --by)
    failed with UnicodeEncodeError after printing part of the listing."""
    lines = ['{"type":"session","version":3,"id":"sur-1","timestamp":"2024-01-01T00:00:00.000Z","cwd":"/w\\ud800"}',
             '{"type":"message","id":"a1","parentId":null,"timestamp":"2024-01-01T00:00:01.000Z",'
             '"message":{"role":"user","content":"hi","timestamp":1}}',
             '{"type":"session_info","id":"a2","parentId":"a1","timestamp":"2024-01-01T00:00:02.000Z","name":"n\\udc00"}']
    (tmp_path / "sur.jsonl").write_text("".join(line + "\n" for line in lines))
    assert cli(db_url, "import", str(tmp_path / "sur.jsonl"))[0] == 0
    for args, shown in ((["list"], "/w⟨U+D800⟩  n⟨U+DC00⟩"),  # shown as the web viewer shows it
                        (["list", "--csv"], "/w\\ud800,n\\udc00"),  # data: JSON's escape
                        (["stats", "--by", "cwd"], "/w\\ud800  ")):  # the column as stored (db_text)
        done = subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, *args], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and shown in done.stdout, (args, done.stdout, done.stderr)


def test_session_text_is_neither_markup_nor_terminal_control(tmp_path: Path, db_url: str) -> None:
    """A table cell was rich markup ("[/]" failed the listing, "[red]" coloured and vanished), and
    escape sequences from a message or label (clear the screen, set the title) reached the terminal."""
    lines = ['{"type":"session","version":3,"id":"mk-[/]x","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/e"}',
             '{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z",'
             '"message":{"role":"user","content":"hi \\u001b]0;PWNED\\u0007 [red]z\\u001b[2J","timestamp":1}}',
             '{"type":"label","id":"l1","parentId":"a1","timestamp":"2025-01-01T00:00:02.000Z","targetId":"a1",'
             '"label":"lab\\u001b[31mred"}']
    (tmp_path / "mk.jsonl").write_text("".join(line + "\n" for line in lines))
    assert cli(db_url, "import", str(tmp_path / "mk.jsonl"))[0] == 0
    for args in (["list", "--table"], ["list"], ["tree", "mk-[/]x"], ["search", "hi", "--table"], ["search", "hi"]):
        code, out, err = cli(db_url, *args)
        assert code == 0 and ("mk-[/]x" in out or args[0] == "tree"), (args, out, err)
        assert "\x1b" not in out and "\x07" not in out and "[red]z" in out, (args, out)  # as the web viewer shows it
    code, out, _ = cli(db_url, "list", "--json")  # the data formats keep the text as it is
    assert json.loads(out)[0]["firstMessage"] == "hi \x1b]0;PWNED\x07 [red]z\x1b[2J"


def test_piped_plain_lines_stay_one_record_a_line(tmp_path: Path, db_url: str) -> None:
    """Line breaks in a cwd, an entry id, a label, a model or a tool name split a record over
    lines (scripts read the piped output a line a record), and an import's result line and its
    warnings printed the file's own escape sequences."""
    lines = ['{"type":"session","version":3,"id":"nl-s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w\\nx"}',
             '{"type":"message","id":"a\\nb","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z",'
             '"message":{"role":"user","content":"zebracorn one","timestamp":1}}',
             '{"type":"message","id":"c\\u2028d","parentId":"a\\nb","timestamp":"2025-01-01T00:00:02.000Z",'
             '"message":{"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"re\\nad","arguments":{}}],'
             '"api":"x","provider":"p\\nq","model":"m\\nn","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,'
             '"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}},'
             '"stopReason":"toolUse","timestamp":2}}',
             '{"type":"session_info","id":"e","parentId":"c\\u2028d","timestamp":"2025-01-01T00:00:03.000Z",'
             '"name":"my\\nname"}',
             '{"type":"future\\u001b[2J\\nkind","id":"f","parentId":"e","timestamp":"2025-01-01T00:00:04.000Z"}']
    code, out, err = _import_lines(tmp_path, db_url, lines)
    assert code == 0 and len(out.splitlines()) == 1 and "\x1b" not in out + err, (out, err)
    assert all(line.startswith(("warning: ", "1 file")) for line in err.splitlines()), err
    for args, records in ((["list"], 1), (["search", "zebracorn"], 1), (["tree", "nl-s"], 4),
                          (["stats", "--by", "model"], 2), (["stats", "--by", "cwd"], 1),
                          (["stats", "--by", "tool"], 1)):
        code, out, err = cli(db_url, *args)
        assert code == 0 and len(out.splitlines()) == records, (args, out, err)
    code, out, _ = cli(db_url, "stats", "nl-s")
    assert code == 0 and "p⟨U+000A⟩q/m⟨U+000A⟩n" in out and "Session nl-s" in out


def test_search_shows_a_snippets_text_as_written(tmp_path: Path, db_url: str) -> None:
    """The snippet is an HTML fragment (its text escaped): the terminal shows the text."""
    lines = ['{"type":"session","version":3,"id":"mk-s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/e"}',
             '{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z",'
             '"message":{"role":"user","content":"if a < b && <mark>c</mark> zebracorn","timestamp":1}}']
    assert _import_lines(tmp_path, db_url, lines)[0] == 0
    for args in (["search", "zebracorn"], ["search", "zebracorn", "--table"]):
        code, out, _ = cli(db_url, *args)
        assert code == 0 and "if a < b && <mark>c</mark> zebracorn" in " ".join(out.split()), (args, out)
    code, out, _ = cli(db_url, "search", "zebracorn", "--json")
    assert json.loads(out)[0]["snippet"] == "if a &lt; b &amp;&amp; &lt;mark&gt;c&lt;/mark&gt; <mark>zebracorn</mark>"


def test_export_all_reports_one_line_a_session(tmp_path: Path, db_url: str) -> None:
    lines = ['{"type":"session","version":3,"id":"ev\\nil","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/e"}',
             '{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z",'
             '"message":{"role":"user","content":"hi","timestamp":1}}']
    assert _import_lines(tmp_path, db_url, lines)[0] == 0
    code, out, err = cli(db_url, "export", "--all", str(tmp_path / "out"))
    assert code == 0 and len(out.splitlines()) == 1 and out.startswith("ev⟨U+000A⟩il -> "), (out, err)


def _import_lines(tmp_path: Path, db_url: str, lines: list[str]) -> tuple[int, str, str]:
    """Write ``lines`` as a session file and import it: the command's (code, stdout, stderr)."""
    path = tmp_path / "session.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return cli(db_url, "import", str(path))
