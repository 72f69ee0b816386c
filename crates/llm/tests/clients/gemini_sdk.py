"""The official `google-genai` SDK making a Gemini tool loop of two turns against a local server:
the documented pattern for thinking models (the first response's content, thought parts and
thought signatures included, appended to the conversation as it came, then the function
responses). The server records both requests; the Rust test compares them with what the
Recursive client sends for the same calls.

With `cache` after the URL, the SDK makes an explicit cache of the system instruction, tools and
tool config (`caches.create`) and one call naming it, for the Rust test to compare with the
Recursive client's cached call. The system instruction is SYSTEM repeated, as in the test.

Usage: python gemini_sdk.py BASE_URL [cache]
"""

import json
import sys

from google import genai
from google.genai import types


SYSTEM = "You are an RLM. " * 500


def cached(client: genai.Client, echo: types.FunctionDeclaration) -> None:
    cache = client.caches.create(
        model="gemini-2.5-flash",
        config=types.CreateCachedContentConfig(
            system_instruction=SYSTEM,
            tools=[types.Tool(function_declarations=[echo])],
            tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="AUTO")),
            ttl="600s",
        ),
    )
    config = types.GenerateContentConfig(
        cached_content=cache.name,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        max_output_tokens=2000,
        thinking_config=types.ThinkingConfig(thinking_budget=8192, include_thoughts=True),
    )
    contents = [types.Content(role="user", parts=[types.Part(text="Echo one.")])]
    answer = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    print(json.dumps({"cache": cache.name, "answer": answer.text}))


def main() -> None:
    client = genai.Client(
        api_key="AIza-test",
        http_options=types.HttpOptions(base_url=sys.argv[1], api_version="v1beta"),
    )
    echo = types.FunctionDeclaration(
        name="echo",
        description="Echo the text back.",
        parameters=types.Schema(
            type="OBJECT",
            properties={"text": types.Schema(type="STRING", description="What to echo.")},
            required=["text"],
        ),
    )
    if sys.argv[2:] == ["cache"]:
        cached(client, echo)
        return
    config = types.GenerateContentConfig(
        system_instruction="You echo.",
        tools=[types.Tool(function_declarations=[echo])],
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="AUTO")),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        max_output_tokens=2000,
        thinking_config=types.ThinkingConfig(thinking_budget=8192, include_thoughts=True),
    )
    contents = [types.Content(role="user", parts=[types.Part(text="Echo one.")])]
    first = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    contents.append(first.candidates[0].content)
    calls = first.function_calls or []
    contents.append(
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name=c.name, response={"output": c.args["text"]}) for c in calls],
        )
    )
    second = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    print(json.dumps({"answer": second.text, "calls": [c.name for c in calls]}))


if __name__ == "__main__":
    main()
