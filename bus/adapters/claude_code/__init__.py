"""Claude Code on the bus, in one place: its hooks, the agents whose hooks speak its dialect, its command hooks.

- ``mapping``: a hook input becomes an intercept and events, the decision its hook output (docs/integrations.md);
  ``codex`` and ``gemini`` are the dialects of it Codex and Gemini CLI speak.
- ``relay``: the service of ``hookbus up`` that answers ``hookbus claude-hook``/``codex-hook``/``gemini-hook``
  (the thin command is ``bus/_cli/agent_hook.py``), each asker in its fair share (``fair_slots``);
  ``http_hook``: the same mapping as ``POST /hooks/claude-code``, served by the hooks API.
- ``hook_rules``: matchers and which permission decision wins, as Claude Code reads them.
- claude-hooks.json's command hooks and Claude Code plugins, served as middleware modules by ``hookbus up``:
  ``command_file`` (the file), ``command_run`` (one command run in the sandbox, its answer read),
  ``command_modules`` (the modules and their service).
"""
