"""Shell hooks: hooks.json, the worker that runs them, its limits and metrics."""
