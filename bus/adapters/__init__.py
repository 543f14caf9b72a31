"""Adapters that put agents and agent frameworks on the bus.

Claude Code, Codex and Gemini CLI hooks (``claude_code``, ``codex``, ``gemini``,
``relay``), LangChain (``langchain``; v1 agents: ``langchain_agents``) and the OpenAI
Agents SDK (``openai_agents``). A framework
adapter imports its framework when it is imported itself (never from
``import bus``), so the core stays small; install the matching extra
(``hookbus[langchain]``, ``hookbus[openai-agents]``). docs/integrations.md
shows them in use.
"""
