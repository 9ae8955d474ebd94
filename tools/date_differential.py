#!/usr/bin/env python3
"""Date strings against V8: seeded odd timestamps read by ``parse_js_date`` and by the real Node.

    python tools/date_differential.py --count 200000 --seed 1          # a campaign, prints mismatches
    python tools/date_differential.py --count 6000 --seed 20261207 \\
        --write tests/fixtures/dates/v8_date_strings.json              # the suite's golden file

Pi reads every entry's ``timestamp`` with ``new Date(text)``; V8 accepts far more than the ISO
format there (``"Feb 1 2025"``, ``"Sat, 01 Feb 2025 09:00:00 GMT"``, ``"2/3"``...).  Each string
is drawn from ``Random(f"{seed}:{i}")`` alone: either a run of one to nine random pieces (numbers
of 1-12 digits, the symbols and words V8's reader knows, month and zone names in any case, noise
words, parentheses, non-ASCII text, NULs, white space) or a familiar format (ISO, RFC 2822,
``Date.prototype.toString``, slashes, US and European orders) with one to three characters
inserted, deleted or replaced.  Node runs with ``TZ=UTC``, as the oracle does.  Ends with
``date-differential: M mismatches of N``; exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from random import Random

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from store.format.jsdate import parse_js_date  # noqa: E402
from tests.oracle_support import ORACLE_NODE, node_apply, node_version  # noqa: E402

_MONTHS = ["Jan", "February", "mar", "APR", "May", "june", "Jul", "August", "Sept", "oct", "Nov", "DEC",
           "Ja", "Junk", "Marchy", "Sep.", "Mayday"]
_ZONES = ["Z", "z", "UT", "UTC", "utc", "GMT", "gmt", "EST", "EDT", "CST", "CDT", "MST", "MDT", "PST", "PDT",
          "UTCX", "GMT0", "ZZ", "T", "t", "Zulu"]
_WORDS = ["am", "AM", "pm", "P.M.", "Mon", "Sat,", "Tuesday", "x", "foo", "at", "noon", "é", "日本", "\u00a0",
          "\u2028", "\U0001F600", "\ud800", "A", "[", "_", "~", "@", "\x00", "th", "of"]
_SYMBOLS = [":", "::", "-", "+", ".", ")", "(", ",", "/", " ", "  ", "\t", "\n", "\r", "\x0b", "'", "#",
            "(GMT+01:00)", "(a(b)c)", "(unclosed", "()", "+-", "--", "T", "Z", "."]
_TEMPLATES = [
    "2025-02-01T09:00:00.000Z", "2025-02-01T09:00:00+01:00", "2025-02-01 09:00:00", "2025-02-01",
    "+002025-02-01T09:00:00Z", "-000001-01-01T00:00:00Z", "-000000-01-01", "2025-02-01T24:00:00Z",
    "Sat, 01 Feb 2025 09:00:00 GMT", "Sat Feb 01 2025 09:00:00 GMT+0000 (Coordinated Universal Time)",
    "Feb 1, 2025 9:00 PM", "1 February 2025 09:00", "2025/02/01 09:00:00", "02/01/2025", "2/3",
    "2025-2-1", "12345", "Feb 1 2025 10:00:00 EST", "2025-02-01 09:00:00 +0530", "09:00 2025-02-01",
    "2025-02-01T09:00:00.123456789+05:30", "Thu, 01 Jan 1970 00:00:00 GMT-0800", "1 Jan 99",
    "Jan 1 49 12:00 am", "2025-02-01 12:30:45.5 pm", "10:20:30.456 Feb 3 2001 UTC+1:30",
    "2025-02-01 9:00:: ", "2025.02.01", "275760-09-13", "Feb 30 2025", "Dec 31 275760 23:59 GMT-5",
]


def _number(rng: Random) -> str:
    length = rng.choice([1, 1, 2, 2, 2, 3, 4, 4, 4, 6, 6, 9, 10, 12])
    return "".join(rng.choice("0123456789") for _ in range(length))


def _piece(rng: Random) -> str:
    kind = rng.random()
    if kind < 0.40:
        return _number(rng)
    if kind < 0.65:
        return rng.choice(_SYMBOLS)
    if kind < 0.78:
        return rng.choice(_MONTHS)
    if kind < 0.90:
        return rng.choice(_ZONES)
    return rng.choice(_WORDS)


def _mutate(rng: Random, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(text) + 1)
        action = rng.random()
        if action < 0.4:
            text = text[:at] + rng.choice([_piece(rng), rng.choice("0123456789"), " "]) + text[at:]
        elif action < 0.7 and text:
            text = text[:at] + text[at + 1:]
        elif text:
            text = text[:at] + rng.choice("0123456789:-+./ TZaP(") + text[at + 1:]
    return text


def date_string(seed: int | str, index: int) -> str:
    """Case ``index`` of ``seed``: the same string on every machine."""
    rng = Random(f"{seed}:{index}")
    if rng.random() < 0.45:
        template = rng.choice(_TEMPLATES)
        return template if rng.random() < 0.1 else _mutate(rng, template)
    return "".join(_piece(rng) for _ in range(rng.randint(1, 9)))


def date_strings(seed: int | str, count: int) -> list[str]:
    return [date_string(seed, index) for index in range(count)]


def node_times(node: Path, strings: list[str]) -> list[int | None]:
    """``new Date(s).getTime()`` for each string in the given Node (null: NaN)."""
    return node_apply("(texts) => texts.map((text) => { const t = new Date(text).getTime(); "
                      "return Number.isNaN(t) ? null : t; })", strings, node)


def ours(text: str) -> int | None:
    time = parse_js_date(text)
    return None if time is None else int(time)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--seed", default="1")
    parser.add_argument("--node", type=Path, default=ORACLE_NODE,
                        help=f"the Node to ask (default: the oracle's, {ORACLE_NODE})")
    parser.add_argument("--write", type=Path, help="write the strings and Node's times here as a golden file")
    parser.add_argument("--show", type=int, default=20, help="mismatches to print")
    args = parser.parse_args(argv)
    strings = date_strings(args.seed, args.count)
    expected = node_times(args.node, strings)
    mismatches = [(text, want, ours(text)) for text, want in zip(strings, expected, strict=True) if ours(text) != want]
    for text, want, got in mismatches[: args.show]:
        print(f"{text!r}: node {want}, ours {got}")
    valid = sum(time is not None for time in expected)
    print(f"date-differential: {len(mismatches)} mismatches of {len(strings)} ({valid} dates in Node, "
          f"{node_version(args.node)}, seed {args.seed})")
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        head = json.dumps({"node": node_version(args.node), "seed": args.seed})[:-1]
        pairs = zip(strings, expected, strict=True)
        cases = ",\n".join(json.dumps([text, time]) for text, time in pairs)  # one case a line
        args.write.write_text(f'{head}, "cases": [\n{cases}\n]}}\n', "utf-8")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
