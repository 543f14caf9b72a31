"""The journal: entries of what happened, published to a JetStream stream."""
