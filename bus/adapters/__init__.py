"""Adapters that put agents and agent frameworks on the bus.

Claude Code and Codex hooks (``claude_code``, ``codex``, ``relay``), LangChain
(``langchain``) and the OpenAI Agents SDK (``openai_agents``). A framework
adapter imports its framework when it is imported itself (never from
``import bus``), so the core stays small; install the matching extra
(``hookbus[langchain]``, ``hookbus[openai-agents]``). docs/integrations.md
shows them in use.
"""
