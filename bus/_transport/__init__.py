"""The transport: the one place that talks to NATS through nats-py."""
