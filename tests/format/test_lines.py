"""iter_lines / decode_line: Pi's way of cutting and decoding a file."""

import io
import random
import tracemalloc

import pytest

from store.format.lines import RawLine, decode_line, iter_lines
from tests.oracle_support import SHARED


def _lines(data: bytes, chunk_size: int = 1 << 20) -> list[RawLine]:
    return list(iter_lines(io.BytesIO(data), chunk_size))


def _joined(lines: list[RawLine]) -> bytes:
    return b"".join(line.data + line.eol for line in lines)


def test_empty_stream_yields_nothing() -> None:
    assert _lines(b"") == []


def test_final_newline_does_not_start_a_line() -> None:
    assert _lines(b"a\nb\n") == [RawLine(1, b"a", b"\n"), RawLine(2, b"b", b"\n")]
    assert _lines(b"\n") == [RawLine(1, b"", b"\n")]
    assert _lines(b"\n\n") == [RawLine(1, b"", b"\n"), RawLine(2, b"", b"\n")]


def test_last_line_without_newline() -> None:
    assert _lines(b"a\nb") == [RawLine(1, b"a", b"\n"), RawLine(2, b"b", b"")]
    assert _lines(b"x\r") == [RawLine(1, b"x\r", b"")]  # no "\n": the "\r" is data


def test_crlf_lines() -> None:
    assert _lines(b"a\r\nb\r\n\r\nc") == [
        RawLine(1, b"a", b"\r\n"),
        RawLine(2, b"b", b"\r\n"),
        RawLine(3, b"", b"\r\n"),
        RawLine(4, b"c", b""),
    ]


def test_only_newline_splits() -> None:
    data = "a\u2028b\u2029c\rd\x0be\x0cf\x85g\x1ch".encode()
    assert _lines(data + b"\n") == [RawLine(1, data, b"\n")]


def test_line_longer_than_many_chunks() -> None:
    long_line = bytes(range(256)).replace(b"\n", b"") * 50
    data = b"short\n" + long_line + b"\r\n" + long_line
    for chunk_size in (1, 2, 3, 7, 255, 4096, 1 << 20):
        assert _lines(data, chunk_size) == [
            RawLine(1, b"short", b"\n"),
            RawLine(2, long_line, b"\r\n"),
            RawLine(3, long_line, b""),
        ]


def test_crlf_split_across_chunks() -> None:
    for chunk_size in range(1, 6):
        assert _lines(b"ab\r\ncd\r\n", chunk_size) == [RawLine(1, b"ab", b"\r\n"), RawLine(2, b"cd", b"\r\n")]


def test_random_bytes_reassemble_exactly() -> None:
    rng = random.Random(1234)
    alphabet = [b"\n", b"\r", b"\r\n", b"a", b"{", b"\xff", b"\xe2\x80", b"\xe2\x80\xa8", b"\x00", b" "]
    for _ in range(2000):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        chunk_size = rng.choice([1, 2, 3, 5, 8, 64])
        lines = _lines(data, chunk_size)
        assert _joined(lines) == data
        assert [line.number for line in lines] == list(range(1, len(lines) + 1))
        assert lines == _lines(data)  # the chunk size never changes the result
        expected = data.split(b"\n")
        if expected[-1] == b"":
            expected.pop()
        assert len(lines) == len(expected)
        for line in lines:
            assert b"\n" not in line.data
            assert line.eol in (b"\n", b"\r\n", b"")
            assert line.eol != b"\n" or not line.data.endswith(b"\r")
        assert all(line.eol for line in lines[:-1])


def test_memory_stays_bounded_by_the_longest_line() -> None:
    class GeneratedStream(io.RawIOBase):
        """20 MB of 1000-byte lines plus one 1 MB line, produced on demand."""

        def __init__(self) -> None:
            self.left = 20_000_000
            self.long_line_sent = False

        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            if not self.long_line_sent:
                self.long_line_sent = True
                return b"x" * 1_000_000 + b"\n"
            data = (b"y" * 999 + b"\n") * (min(size, self.left) // 1000)
            self.left -= len(data)
            return data

    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_lines(GeneratedStream(), chunk_size=1 << 16))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 1 + 20_000
    assert peak < 4_000_000  # a few times the longest line, far below the 21 MB read


def test_real_files_reassemble_exactly() -> None:
    files = sorted((SHARED / "oracle" / "samples" / "legacy").glob("*.jsonl"))
    files += sorted((SHARED / "corpus" / "pi-sessions").glob("*.jsonl"))
    if not files:
        pytest.skip(f"shared test data not found under {SHARED}")
    for path in files:
        data = path.read_bytes()
        assert _joined(_lines(data, 4096)) == data, path.name


# --- decode_line ---------------------------------------------------------------------------------

# Expected code points from Node 22: Buffer.from(hex, "hex").toString("utf8"), which gave the
# same result as a StringDecoder fed byte by byte (maximal-subpart replacement).
DECODE_GOLDEN = [
    ("eda080", ["fffd", "fffd", "fffd"]),  # an encoded surrogate
    ("f08080", ["fffd", "fffd", "fffd"]),  # overlong 4-byte start
    ("f4908080", ["fffd", "fffd", "fffd", "fffd"]),  # beyond U+10FFFF
    ("c0af", ["fffd", "fffd"]),
    ("e282", ["fffd"]),  # truncated sequence: one replacement
    ("e28261", ["fffd", "61"]),
    ("ff", ["fffd"]),
    ("f09f98", ["fffd"]),
    ("e080af", ["fffd", "fffd", "fffd"]),
    ("f888808080", ["fffd", "fffd", "fffd", "fffd", "fffd"]),
    ("efbbbf61", ["feff", "61"]),  # a BOM is kept as U+FEFF
    ("c328", ["fffd", "28"]),
    ("a0a1", ["fffd", "fffd"]),
    ("e1a0c0", ["fffd", "fffd"]),
    ("f09f9880", ["1f600"]),
    ("61f0a0", ["61", "fffd"]),
    ("edbfbf", ["fffd", "fffd", "fffd"]),
    ("f0908080", ["10000"]),
    ("c2", ["fffd"]),
]


@pytest.mark.parametrize(("hex_bytes", "code_points"), DECODE_GOLDEN)
def test_decode_line_replaces_like_node(hex_bytes: str, code_points: list[str]) -> None:
    data = bytes.fromhex(hex_bytes)
    text, valid = decode_line(data)
    assert [format(ord(char), "x") for char in text] == code_points
    assert valid == (text.encode("utf-8") == data)


def test_decode_line_valid_utf8() -> None:
    text, valid = decode_line('{"a":"日本 👩‍💻 \u2028"}'.encode())
    assert (text, valid) == ('{"a":"日本 👩‍💻 \u2028"}', True)
    assert decode_line(b"") == ("", True)
    assert decode_line(b"ab\xffcd") == ("ab\ufffdcd", False)
