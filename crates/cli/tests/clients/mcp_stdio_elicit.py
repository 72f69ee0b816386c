"""Drives `recursive mcp` over stdio with the official MCP Python SDK as a client that declares
elicitation: starts the server command given after the workspace (in that directory, with this
process's environment), calls the `saver` agent twice — the person accepts the first run's
permission ask and declines the second's — and prints one JSON object of what it saw.
Usage: mcp_stdio_elicit.py WORKSPACE COMMAND [ARGS...]"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

workspace, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]


async def main():
    answers = [
        types.ElicitResult(action="accept", content={"allow": True}),
        types.ElicitResult(action="decline"),
    ]
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return answers.pop(0)

    server = StdioServerParameters(command=command, args=args, env=dict(os.environ), cwd=workspace)
    async with stdio_client(server) as streams:
        async with ClientSession(streams[0], streams[1], elicitation_callback=on_elicit) as session:
            await session.initialize()
            first = await session.call_tool("saver", {"input": "save the first"})
            second = await session.call_tool("saver", {"input": "save the second"})
    print(json.dumps({"first": first.content[0].text, "second": second.content[0].text, "asked": asked}))


asyncio.run(main())
