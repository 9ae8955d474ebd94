"""Fixtures of the interchange tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A scratch folder the user of ``tests.interchange.test_sync._as_nobody`` can write in
    (pytest's own is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="pi-store-unreadable-"))
    folder.chmod(0o777)
    yield folder
    for inner in folder.rglob("*"):
        inner.chmod(0o777)
    shutil.rmtree(folder)
