"""Subscriber workers: shell hooks from hooks.json, Python subscribers, the hooks HTTP API."""

from subscribers.sdk import EventHandler, Subscriber

__all__ = ["EventHandler", "Subscriber"]
