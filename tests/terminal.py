"""Run a command with a pseudo-terminal as its stdin, stdout and stderr, as a person's shell would."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

_SGR = re.compile(r"\x1b\[[0-9;]*m")  # colours and styles


def run_in_terminal(args: list[str], env: dict[str, str], *, columns: int = 120,
                    timeout: float = 300) -> tuple[int, str]:
    """Exit status and everything the command wrote to its terminal, control sequences included."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen(args, stdin=follower, stdout=follower, stderr=follower, close_fds=True,
                               env={**env, "TERM": "xterm-256color", "COLUMNS": str(columns)})
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command and its children closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=timeout), b"".join(chunks).decode("utf-8", "replace")


def without_styles(text: str) -> str:
    """``text`` without colour codes, with the terminal's CR LF line ends as LF."""
    return _SGR.sub("", text).replace("\r\n", "\n")
