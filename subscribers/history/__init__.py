"""Recorded history (opt-in): events kept in a JetStream stream, and reading them back by time and session."""
