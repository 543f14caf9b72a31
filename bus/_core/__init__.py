"""The core: the protocol (envelope, subjects, depth, stages, decisions, declarations, base errors); it imports
nothing else of hookbus and does no I/O."""
