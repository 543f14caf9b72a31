"""The journal: entries of what happened, published to a JetStream stream."""

from bus._journal.entries import JournalEntry

__all__ = ["JournalEntry"]
