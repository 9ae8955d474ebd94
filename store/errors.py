"""Exceptions raised by the store: one type per kind of failure, all under :class:`StoreError`."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of everything the store raises on purpose."""


class StoreClosed(StoreError):
    """The store was closed: it opens no more connections."""


class SessionNotFound(StoreError, LookupError):
    """No session with that id is stored."""


class SessionExists(StoreError):
    """A session with that id is already stored (and the new data is not the same file)."""


class NotPiSession(StoreError):
    """The stored session is a file Pi refuses to open (no session header first, or a migration
    Pi cannot make): it is kept byte for byte, to export or delete, but cannot be opened or
    written as a session."""


class EntryNotFound(StoreError, LookupError):
    """No entry with that id in the session (branch, label, context edit, branched session)."""


class NotOnActiveBranch(StoreError):
    """A context edit targets an entry that is not on the path from the root to the leaf."""


class NotEditable(StoreError):
    """A context edit targets an entry that contributes no editable model content."""


class InvalidReplacement(StoreError, ValueError):
    """A context-edit replacement is neither null nor ``{"content": str | list}``."""


class InvalidEntry(StoreError, ValueError):
    """Data handed to an ``append_*`` method cannot form a valid entry."""


class InvalidSessionId(StoreError, ValueError):
    """A chosen session id is not one Pi accepts (letters, digits, ``.``, ``_``, ``-``)."""


class ImportFailed(StoreError):
    """A file could not be imported; nothing of it was stored. The message names file and line."""


class FileChanged(ImportFailed):
    """The file was rewritten or truncated while it was being imported; nothing of it was stored."""


class ExportRefused(StoreError):
    """An export would replace a file that holds what the store does not (lines written after the
    store's copy, or another file); nothing was written. Import the file first, or force it."""


class SessionChanged(StoreError):
    """Another writer changed the session since this manager last read or wrote it; nothing was
    written. ``refresh()`` the manager (its leaf follows the stored session) and decide again."""

    def __init__(self, session_id: str, expected: int, found: int | None) -> None:
        found_text = "it was deleted" if found is None else f"found version {found}"
        super().__init__(f"session {session_id} changed since this manager last saw it (expected version "
                         f"{expected}, {found_text}); nothing was written: refresh() and try again")
        self.session_id, self.expected, self.found = session_id, expected, found


class SessionClaimed(StoreError):
    """The session is claimed by another writer (or this writer's claim was taken over: its
    fencing token is stale); nothing was written."""
