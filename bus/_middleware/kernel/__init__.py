"""The kernel side of the middleware: intercept, the view of the chain, drains, metrics."""
