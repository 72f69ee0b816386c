"""Drives Recursive's MCP server (`/mcp` of a running `recursive serve --client-asks`) with the
official MCP Python SDK as a client that declares elicitation and logging: calls the `saver` agent
twice — the person accepts the first run's permission ask and declines the second's — and reads
what the server offers besides tools (resources, prompts, completion). Prints one JSON object of
what it saw. Usage: mcp_elicit.py HTTP_BASE_URL"""
import asyncio
import json
import sys

import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

base = sys.argv[1]


def field(obj, snake):
    """A field by its snake_case or camelCase name."""
    if hasattr(obj, snake):
        return getattr(obj, snake)
    head, *rest = snake.split("_")
    return getattr(obj, head + "".join(w.title() for w in rest))


async def main():
    answers = [
        types.ElicitResult(action="accept", content={"allow": True}),
        types.ElicitResult(action="decline"),
    ]
    asked = []
    logged = []

    async def on_elicit(context, params):
        schema = field(params, "requested_schema")
        asked.append({"message": params.message, "fields": sorted((schema or {}).get("properties", {}))})
        return answers.pop(0)

    async def on_log(params):
        logged.append({"level": params.level, "type": (params.data or {}).get("type")})

    client = httpx2.AsyncClient(timeout=60)
    async with streamable_http_client(base + "/mcp", http_client=client) as streams:
        async with ClientSession(streams[0], streams[1], elicitation_callback=on_elicit, logging_callback=on_log) as session:
            await session.initialize()
            await session.set_logging_level("info")
            first = await session.call_tool("saver", {"input": "save the first"})
            second = await session.call_tool("saver", {"input": "save the second"})
            resources = await session.list_resources()
            uris = [str(r.uri) for r in resources.resources]
            run_uri = next(u for u in uris if u.startswith("recursive://runs/"))
            run = await session.read_resource(run_uri)
            prompts = await session.list_prompts()
            prompt = await session.get_prompt("saver", {"input": "keep this"})
            done = await session.complete(types.PromptReference(type="ref/prompt", name="saver"), {"name": "input", "value": ""})
    print(json.dumps({
        "first": first.content[0].text,
        "second": second.content[0].text,
        "asked": asked,
        "log_levels": sorted({entry["level"] for entry in logged}),
        "log_types": sorted({entry["type"] or "" for entry in logged}),
        "uris": uris,
        "run": json.loads(run.contents[0].text),
        "prompts": sorted(p.name for p in prompts.prompts),
        "prompt_text": prompt.messages[0].content.text,
        "completion": list(done.completion.values),
    }))


asyncio.run(main())
