"""Asks: calls held for an operator's answer, in the write-once bucket ``hookbus_asks``."""
