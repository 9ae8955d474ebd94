"""Output a person reads, through the real CLI: ``compact``'s summary (``--json``: the whole
document), ``inspect`` indented on a terminal and unchanged when piped, the import progress bar
never sharing a line with the per-file lines, and counts in the singular when there is one."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from store.cli import main
from tests.terminal import run_in_terminal, without_styles

SESSIONS = Path(__file__).resolve().parent / "fixtures" / "oracle" / "sessions"
COMPACTABLE = SESSIONS / "small-seed32-0.jsonl"  # with --keep-recent 300 a compaction has work to do
COMPACTABLE_ID = "01922b86-b51f-7754-877a-d47a8729ab04"


def cli(db_url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--db", db_url, *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def compactable(db_url: str) -> str:
    assert cli(db_url, "import", str(COMPACTABLE))[0] == 0
    return db_url


def test_compact_dry_run_summary_and_json(compactable: str) -> None:
    code, out, _ = cli(compactable, "compact", COMPACTABLE_ID, "--dry-run", "--keep-recent", "300")
    assert code == 0
    assert out.splitlines() == [
        f"{COMPACTABLE_ID}: dry run, nothing stored",
        "  summarised  6 messages (toolResult 4, assistant 2)",
        "              with the previous compaction's summary",
        "  kept        10 entries from f6c31803 (the first kept entry) to the leaf",
        "  files       3 read, 6 modified",
        "  tokens      3,614 before, ~251 kept verbatim (plus the summary) after",
    ]
    code, out, _ = cli(compactable, "compact", COMPACTABLE_ID, "--dry-run", "--keep-recent", "300", "--json")
    doc = json.loads(out)
    assert code == 0 and list(doc) == ["sessionId", "dryRun", "plan", "keptEntryIds", "keptTokens"]
    assert doc["sessionId"] == COMPACTABLE_ID and doc["dryRun"] is True and doc["keptTokens"] == 251
    plan = doc["plan"]
    assert plan["firstKeptEntryId"] == "f6c31803" == doc["keptEntryIds"][0] and len(doc["keptEntryIds"]) == 10
    assert plan["tokensBefore"] == 3614 and plan["messagesToSummarize"]["count"] == 6
    assert sorted(plan["messagesToSummarize"]["roles"]) == ["assistant"] * 2 + ["toolResult"] * 4
    assert len(plan["readFiles"]) == 3 and len(plan["modifiedFiles"]) == 6
    assert plan["settings"]["keepRecentTokens"] == 300 and plan["isSplitTurn"] is False


def test_compact_run_summary_then_nothing_to_do(compactable: str) -> None:
    code, out, _ = cli(compactable, "compact", COMPACTABLE_ID, "--keep-recent", "300", "--summarizer", "deterministic")
    lines = out.splitlines()
    assert code == 0 and re.fullmatch(rf"{COMPACTABLE_ID}: compaction [0-9a-f]{{8}} appended", lines[0])
    assert lines[1:5] == [
        "  summarised  6 messages (toolResult 4, assistant 2)",
        "              with the previous compaction's summary",
        "  kept        10 entries from f6c31803 (the first kept entry) to the leaf",
        "  files       3 read, 6 modified",
    ]
    after = int(re.fullmatch(r"  tokens      3,614 before, ([0-9,]+) after", lines[5])[1].replace(",", ""))
    assert 251 < after < 3614  # the kept messages and the summary
    compaction_id = lines[0].split()[2]
    described = json.loads(cli(compactable, "inspect", COMPACTABLE_ID)[1])
    assert described["leafId"] == described["latestCompactionId"] == compaction_id
    (entry,) = [e for e in described["entries"] if e["id"] == compaction_id]
    assert entry["type"] == "compaction" and entry["firstKeptEntryId"] == "f6c31803"
    assert cli(compactable, "compact", COMPACTABLE_ID, "--keep-recent", "300", "--summarizer", "deterministic") == (
        0, f"{COMPACTABLE_ID}: nothing to summarise (the context ends in a compaction, or all of it is recent)\n", "")
    code, out, _ = cli(compactable, "compact", COMPACTABLE_ID, "--json", "--summarizer", "deterministic")
    assert json.loads(out) == {"sessionId": COMPACTABLE_ID, "compacted": False, "reason": "nothing to summarise"}


def test_compact_run_json(compactable: str) -> None:
    code, out, _ = cli(compactable, "compact", COMPACTABLE_ID, "--keep-recent", "300", "--summarizer", "deterministic",
                       "--json")
    doc = json.loads(out)
    assert code == 0 and list(doc) == ["sessionId", "compacted", "compactionId", "tokensBefore", "tokensAfter",
                                       "firstKeptEntryId"]
    assert doc["compacted"] is True and doc["tokensBefore"] == 3614 and doc["firstKeptEntryId"] == "f6c31803"
    assert 251 < doc["tokensAfter"] < 3614 and re.fullmatch(r"[0-9a-f]{8}", doc["compactionId"])


def test_compact_prints_a_token_count_that_came_as_a_string(tmp_path: Path, db_url: str) -> None:
    """Pi's estimate adds up a file's ``totalTokens`` as JavaScript does: a string stays one.
    Printing it with thousands separators raised after the compaction was stored (exit 1)."""
    lines = [
        {"type": "session", "version": 3, "id": "strtok", "timestamp": "2024-01-01T00:00:00.000Z", "cwd": "/w"},
        {"type": "message", "id": "b1", "parentId": None, "timestamp": "2024-01-01T00:00:01.000Z",
         "message": {"role": "user", "content": "first question, long enough to be summarised", "timestamp": 1}},
        {"type": "message", "id": "b2", "parentId": "b1", "timestamp": "2024-01-01T00:00:02.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "answer"}], "provider": "p",
                     "model": "m", "stopReason": "stop", "timestamp": 2,
                     "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": "100"}}},
        {"type": "message", "id": "b3", "parentId": "b2", "timestamp": "2024-01-01T00:00:03.000Z",
         "message": {"role": "user", "content": "second question", "timestamp": 3}},
    ]
    (tmp_path / "strtok.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli(db_url, "import", str(tmp_path / "strtok.jsonl"))[0] == 0
    code, out, _ = cli(db_url, "compact", "strtok", "--keep-recent", "1", "--dry-run")
    assert code == 0 and re.search(r"tokens      100\d+ before", out), out  # "100" + the estimate after it
    code, out, _ = cli(db_url, "compact", "strtok", "--keep-recent", "1", "--summarizer", "deterministic")
    assert code == 0 and " appended" in out.splitlines()[0]


@pytest.mark.parametrize("value", ["-5", "-1", "abc", "1.5"])
def test_compact_rejects_bad_numbers(tmp_path: Path, value: str) -> None:
    for option in ("--keep-recent", "--reserve"):
        result = CliRunner().invoke(main, ["--db", str(tmp_path / "s.db"), "compact", "s", option, value])
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert result.exit_code == 2 and len(errors) == 1 and f"'{option}'" in errors[0] and value in errors[0]
        assert not (tmp_path / "s.db").exists()


def _pi_store(*args: str) -> list[str]:
    return [sys.executable, "-m", "store.cli", *args]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "PI_STORE_DB")}


def test_inspect_is_indented_on_a_terminal_and_one_line_piped(compactable: str) -> None:
    piped = cli(compactable, "inspect", COMPACTABLE_ID)[1]
    assert piped.count("\n") == 1 and piped.startswith('{"sessionId":')
    code, shown = run_in_terminal(_pi_store("--db", compactable, "inspect", COMPACTABLE_ID), _env())
    text = without_styles(shown)
    assert code == 0 and text.startswith('{\n  "sessionId": ') and "\x1b[" in shown  # coloured
    assert json.loads(text) == json.loads(piped)
    code, shown = run_in_terminal(_pi_store("--db", compactable, "inspect", COMPACTABLE_ID, "--json"), _env())
    assert code == 0 and without_styles(shown) == piped


STATUS_LINE = re.compile(r"(imported|unchanged|grown|conflict|refused|failed|not-session|busy) \S+ <- ")
CONTROL = re.compile(r"\r|\n|\x1b\[\d*[AK]|\x1b\[\?25[lh]")  # line ends, cursor up, erase line, cursor on/off


def test_progress_bar_and_per_file_lines_never_share_a_line(tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "--work--"
    folder.mkdir(parents=True)
    names = sorted(SESSIONS.glob("small-seed*-0.jsonl"))[:6]
    for path in names:
        shutil.copy(path, folder / path.name)
    db = str(tmp_path / "s.db")
    for attempt in ("import", "sync"):  # sync again: unchanged lines under the bar
        code, shown = run_in_terminal(_pi_store("--db", db, attempt, str(tmp_path / "sessions")), _env(), columns=100)
        segments = [s.strip() for s in CONTROL.split(_plain(shown)) if s.strip()]
        assert code == 0, shown
        assert any(s.startswith("importing") and "%" in s for s in segments), segments  # the bar was drawn
        statuses = [s for s in segments if " <- " in s]
        assert len(statuses) == len(names) and all(STATUS_LINE.match(s) for s in statuses), statuses
        assert not [s for s in segments if "importing" in s and " <- " in s]
        status = "imported" if attempt == "import" else "unchanged"
        assert segments[-1].startswith(f"6 files (6 {status}): ") and "importing" not in segments[-1]


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_counts_of_one_are_singular(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    one = tmp_path / "one.jsonl"
    one.write_bytes(b'{"type":"session","version":3,"id":"one","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}\n'
                    b'{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z",'
                    b'"message":{"role":"user","content":"hi","timestamp":1767225601000}}\n')
    result = CliRunner().invoke(main, ["--db", db, "import", str(one)])
    assert result.exit_code == 0
    assert result.stdout == f"imported one <- {one} (2 lines, {one.stat().st_size} bytes)\n"
    assert re.fullmatch(r"1 file \(1 imported\): 1 session stored, 1 entry, \d+ bytes read, 0 warnings in [\d.]+ s"
                        r"(, [\d.]+ MB/s)?\n", result.stderr), result.stderr
    assert re.search(r"  +1 message  ", CliRunner().invoke(main, ["--db", db, "list"]).stdout)
    verified = CliRunner().invoke(main, ["--db", db, "verify", "--all"]).stdout.splitlines()
    assert verified[-1] == "1 session: 1 identical, 0 diverged, 0 api, 0 damaged; database ok"
    exported = CliRunner().invoke(main, ["--db", db, "export", "--all", str(tmp_path / "out")])
    assert exported.stderr == "1 file written, 0 failed, 0 renamed\n"
    deleted = CliRunner().invoke(main, ["--db", db, "delete", "one", "--dry-run"]).stdout
    assert re.fullmatch(r"would delete 1 session: 2 rows, [\d,]+ bytes \(line [\d,]+, raw 0\)\n", deleted), deleted
