"""The output formats of the row-printing commands, field by field, on SQLite and PostgreSQL,
through the real CLI; search syntax; ``pi-store tree``."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from store.cli import main

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
    assert f"* {leaf['id']} compaction" in drawn and "(--full shows them)" in drawn and "├─ " in drawn
