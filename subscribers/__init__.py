"""Services: the long-running parts ``hookbus up`` composes (shell hooks, plugins, the hooks API and console, the
journal, history, metrics) and the record runner, one package each; Python subscribers (``subscribers.sdk``)."""

from subscribers.sdk import Subscriber, SubscriberHandler

__all__ = ["Subscriber", "SubscriberHandler"]
