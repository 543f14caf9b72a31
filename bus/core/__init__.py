"""The core: envelope, subjects, depth, errors, stages, decisions, declarations, payloads; no I/O."""
