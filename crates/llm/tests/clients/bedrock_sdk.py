"""The official AWS SDK for Python (`boto3`) making a Bedrock Converse tool loop of two turns
against a local server (`endpoint_url`), with fixed session credentials: a system prompt, a user
message and one tool, Claude's thinking in `additionalModelRequestFields`, and prompt-cache
points after the system prompt, the tools and the last message; then the documented pattern of
the tool loop — the assistant message appended as the response gave it (its signed reasoning
included) and the tool result in a user message. The server records both requests; the Rust
test compares them with what the Recursive client sends for the same calls.

Usage: python bedrock_sdk.py ENDPOINT_URL
"""

import json
import sys

import boto3
from botocore.config import Config

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CACHE = {"cachePoint": {"type": "default"}}
ECHO = {
    "toolSpec": {
        "name": "echo",
        "description": "Echo the text back.",
        "inputSchema": {
            "json": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "What to echo."}},
                "required": ["text"],
            }
        },
    }
}


def main() -> None:
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-west-2",
        endpoint_url=sys.argv[1],
        aws_access_key_id="ASIASDKORACLE0001",
        aws_secret_access_key="sdk/oracle+secret/key",
        aws_session_token="sdk-oracle-session-token",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )
    request = {
        "modelId": MODEL,
        "system": [{"text": "You echo."}, CACHE],
        "toolConfig": {"tools": [ECHO, CACHE], "toolChoice": {"auto": {}}},
        "inferenceConfig": {"maxTokens": 12288},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 8192}},
    }
    user = {"role": "user", "content": [{"text": "Echo one."}]}
    first = client.converse(messages=[{"role": "user", "content": user["content"] + [CACHE]}], **request)
    turn = first["output"]["message"]
    calls = [block["toolUse"] for block in turn["content"] if "toolUse" in block]
    results = {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": call["toolUseId"], "content": [{"text": call["input"]["text"]}]}}
            for call in calls
        ]
        + [CACHE],
    }
    second = client.converse(messages=[user, turn, results], **request)
    answer = "".join(block.get("text", "") for block in second["output"]["message"]["content"])
    print(json.dumps({"answer": answer, "calls": [call["name"] for call in calls]}))


if __name__ == "__main__":
    main()
