"""Physical lines of a session file, split exactly as Pi splits them.

Pi decodes the file and splits on "\\n" only: "\\r" stays at the end of a CRLF line (JSON.parse
skips it as whitespace), and U+2028/U+2029 or a lone "\\r" never end a line.  Lines are kept as
raw bytes so that a file can be reproduced byte for byte, whatever it contains.
"""

from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

__all__ = ["RawLine", "decode_line", "iter_lines"]


class RawLine(NamedTuple):
    """One physical line: ``data + eol`` are its exact bytes in the file."""

    number: int  # 1-based
    data: bytes  # without the terminator (and without the "\r" of a CRLF)
    eol: bytes  # b"\n", b"\r\n", or b"" for a last line without a newline


def _ended(number: int, line: bytes) -> RawLine:
    if line.endswith(b"\r"):
        return RawLine(number, line[:-1], b"\r\n")
    return RawLine(number, line, b"\n")


def iter_lines(stream: BinaryIO, chunk_size: int = 1 << 20) -> Iterator[RawLine]:
    """Yield the lines of a binary stream; memory stays within one chunk plus the longest line.

    An empty stream yields nothing; a final "\\n" does not start another (empty) line.
    """
    pending: list[bytes] = []  # pieces of a line that began in an earlier chunk
    number = 0
    while chunk := stream.read(chunk_size):
        pieces = chunk.split(b"\n")
        if len(pieces) == 1:
            pending.append(chunk)
            continue
        if pending:
            pending.append(pieces[0])
            pieces[0] = b"".join(pending)
            pending.clear()
        for line in pieces[:-1]:
            number += 1
            yield _ended(number, line)
        if pieces[-1]:
            pending.append(pieces[-1])
    if pending:
        yield RawLine(number + 1, b"".join(pending), b"")


def decode_line(data: bytes) -> tuple[str, bool]:
    """Decode a line as Pi does; the flag says whether the bytes were valid UTF-8.

    Invalid sequences become U+FFFD per maximal subpart (WHATWG, as Node's StringDecoder; Python's
    ``errors="replace"`` does the same).  A caller that gets False must keep the raw bytes: the
    text no longer encodes back to them.
    """
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), False
