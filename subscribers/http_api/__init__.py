"""The hooks HTTP API (edit hooks.json over HTTP with a bearer token) and the operator's console."""
