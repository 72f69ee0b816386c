"""Drives Recursive's MCP server with the official MCP Python SDK, over stdio (`recursive mcp`)
and over streamable HTTP (`/mcp` of a running `recursive serve`), and prints one JSON object of
what it saw. Usage: mcp_client.py RECURSIVE_BINARY MOCK_SCRIPT HTTP_BASE_URL TOKEN AGENT_SPEC
(AGENT_SPEC, `helper=FILE`, is given to `recursive mcp --agent`; the HTTP server was started with it)."""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

binary, script, base, token, agent = sys.argv[1:6]


def field(obj, snake):
    """A field by its 2.x (snake_case) or 1.x (camelCase) name."""
    if hasattr(obj, snake):
        return getattr(obj, snake)
    head, *rest = snake.split("_")
    return getattr(obj, head + "".join(w.title() for w in rest))


async def exercise(session):
    await session.initialize()
    tools = await session.list_tools()
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    result = await session.call_tool(
        "rlm",
        {"question": "How many words are in the notes?", "inputs": {"input1": "alpha beta gamma delta"}},
        progress_callback=on_progress,
    )
    bad = await session.call_tool("run", {"wrong": 1})
    helper = await session.call_tool("helper", {"input": "say hello"})
    return {
        "helper_text": helper.content[0].text,
        "helper_schema": sorted(field(next(t for t in tools.tools if t.name == "helper"), "input_schema")["properties"]),
        "tools": sorted(t.name for t in tools.tools),
        "rlm_schema": sorted(field(next(t for t in tools.tools if t.name == "rlm"), "input_schema")["properties"]),
        # The SDK checks each call's structured content against the tool's outputSchema.
        "output_schemas": sorted({",".join(sorted((field(t, "output_schema") or {}).get("properties", {}))) for t in tools.tools}),
        "structured_ok": (field(result, "structured_content") or {}).get("ok"),
        "text": result.content[0].text,
        "is_error": field(result, "is_error"),
        "progress": progress,
        "bad_is_error": field(bad, "is_error"),
        "bad_text": bad.content[0].text,
    }


def http_transport(url, headers):
    """The SDK's streamable HTTP client (2.x takes a configured client; 1.x takes headers)."""
    try:
        from mcp.client.streamable_http import streamable_http_client
    except ImportError:
        from mcp.client.streamable_http import streamablehttp_client

        return streamablehttp_client(url, headers=headers)
    import httpx2

    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=60))


async def main():
    seen = {}
    params = StdioServerParameters(command=binary, args=["mcp", "--mock-script", script, "--agent", agent, "-q"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            seen["stdio"] = await exercise(session)
    headers = {"Authorization": "Bearer " + token}
    async with http_transport(base + "/mcp", headers) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            seen["http"] = await exercise(session)
    print(json.dumps(seen))


asyncio.run(main())
