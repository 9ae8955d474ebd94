"""Exceptions raised by the store: one type per kind of failure, all under :class:`StoreError`."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of everything the store raises on purpose."""


class SessionNotFound(StoreError, LookupError):
    """No session with that id is stored."""


class SessionExists(StoreError):
    """A session with that id is already stored (and the new data is not the same file)."""


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


class ImportFailed(StoreError):
    """A file could not be imported; nothing of it was stored. The message names file and line."""
