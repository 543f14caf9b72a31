"""Subscriber workers: shell hooks from hooks.json, Python subscribers, the hooks HTTP API."""

from subscribers.sdk import Subscriber, SubscriberHandler

__all__ = ["Subscriber", "SubscriberHandler"]
