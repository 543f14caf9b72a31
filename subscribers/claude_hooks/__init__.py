"""Claude Code command hooks as hookbus middleware handlers (claude-hooks.json, served beside the shell hooks)."""
