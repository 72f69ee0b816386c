"""The official `openai` SDK making a Responses API tool loop of two turns against a local server:
the documented stateless pattern (store=False, include the encrypted reasoning, pass the first
response's output items back with the function_call_output). The server records both requests;
the Rust test compares them with what the Recursive client sends for the same calls.

Usage: python responses_sdk.py BASE_URL
"""

import json
import sys

from openai import OpenAI

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "What to echo."}},
    "required": ["text"],
    "additionalProperties": False,
}


def main() -> None:
    client = OpenAI(base_url=sys.argv[1], api_key="sk-test", max_retries=0)
    common = dict(
        model="gpt-5",
        instructions="You echo.",
        tools=[
            {
                "type": "function",
                "name": "echo",
                "description": "Echo the text back.",
                "parameters": ECHO_SCHEMA,
                "strict": True,
            }
        ],
        parallel_tool_calls=True,
        reasoning={"effort": "medium", "summary": "auto"},
        store=False,
        include=["reasoning.encrypted_content"],
        max_output_tokens=2000,
        prompt_cache_key="tree-1",
    )
    conversation = [{"role": "user", "content": "Echo one."}]
    first = None
    with client.responses.create(input=conversation, stream=True, **common) as events:
        for event in events:
            if event.type == "response.completed":
                first = event.response
    assert first is not None, "no response.completed"
    conversation += first.output
    calls = [item for item in first.output if item.type == "function_call"]
    for call in calls:
        args = json.loads(call.arguments)
        conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": args["text"]})
    answer = ""
    with client.responses.create(input=conversation, stream=True, **common) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                answer += event.delta
    print(json.dumps({"answer": answer, "calls": [c.call_id for c in calls]}))


if __name__ == "__main__":
    main()
