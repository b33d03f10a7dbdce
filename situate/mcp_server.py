"""``situate mcp``: the index as a Model Context Protocol server over stdio (the ``mcp`` package),
so a desktop agent (Claude Desktop, an IDE agent) can search it as a tool.

One tool, ``search(query, k=10)``: the hits as structured output (a list of the objects
``situate search --json`` prints: source, chunk index, blurb, structural context, chunk text,
score).  The embedder and the BM25 index load on the first call and stay loaded.

Configure an agent with the command ``situate mcp --home DATA_FOLDER`` (stdio transport)::

    {"mcpServers": {"situate": {"command": "situate", "args": ["mcp", "--home", "/path/to/data"]}}}
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from situate.resources.settings import data_folder

#: Most hits one tool call returns (an agent's context is the budget, not the table).
MAX_TOOL_K = 50


def create_server(home: str | None = None, collections: dict[str, str] | None = None):
    """The MCP server (``mcp.server.mcpserver.MCPServer``) with the ``search`` tool over data
    folder ``home`` (default ``$SITUATE_HOME``, else ``./.situate``), or over several collections
    (name → data folder: each search covers them all, fused by RRF, each hit naming its
    collection)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from situate.contextual.snippets import hit_json
    from situate.pipelines.operations import MAX_QUERY_CHARS, QueryError, search_collections
    from situate.pipelines.operations import search as run_search
    from situate.pipelines.preflight import StartupError
    from situate.resources.store.objects import normalize_home

    home = normalize_home(data_folder(home))
    server = MCPServer(
        "situate",
        version=importlib.metadata.version("situate"),
        instructions=(
            "Search the user's documents (contextual retrieval: each hit carries its location (file and "
            "lines), the structural context, a blurb situating the chunk where a model wrote one, the lines "
            "that matched and the chunk text). Cite hits by location."
        ),
    )

    @server.tool(
        description="Search the indexed documents. Returns up to k hits, best first, each with "
        "source (file), location (file:first-last line), start_line and end_line, chunk_index, "
        "blurb (where the chunk sits in its document, where a model wrote one), context (file, "
        "headings, enclosing definitions), text (the chunk), matched (its lines that best match the "
        "query, numbered) and score."
    )
    def search(query: str, k: int = 10) -> list[dict[str, Any]]:
        if not 1 <= k <= MAX_TOOL_K:
            raise ToolError(f"k must be 1..{MAX_TOOL_K}, got {k}")
        if len(query) > MAX_QUERY_CHARS:  # bounded like the service's
            raise ToolError(f"the query is {len(query):,} characters: at most {MAX_QUERY_CHARS:,} characters")
        try:
            if collections:
                hits, _warnings = search_collections(query, collections, k)
            else:
                hits, _warnings = run_search(query, k, home)
        except (QueryError, StartupError) as e:  # the agent reads the reason and can correct the call
            raise ToolError(str(e)) from None
        return [hit_json(h, query) for h in hits]

    return server


def main(home: str | None = None, collections: dict[str, str] | None = None) -> int:
    """Serve over stdio until the client closes the stream."""
    create_server(home, collections).run("stdio")
    return 0
