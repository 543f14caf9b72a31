"""Triggers: triggers.yaml and the engine that turns events into agent turns."""
