"""``hookbus mcp``: a transparent MCP proxy that puts every tool call of an MCP server under the bus's guards.

The proxy speaks JSON-RPC on both sides through the official ``mcp`` SDK's
transports (stdio, streamable HTTP) and passes every message through
unchanged, except: ``tools/call`` goes through ``tool.call`` before the
server sees it and its result through ``tool.result``; ``tools/list`` drops
the tools ``tool.list`` refuses; ``resources/read`` goes through
``resource.read``. docs/mcp.md shows it in use.
"""
