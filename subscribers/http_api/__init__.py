"""The hooks HTTP API: edit hooks.json over HTTP with a bearer token."""
