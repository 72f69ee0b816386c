"""Drives `recursive serve` with the official OpenAI Python SDK the way programs that bring their
own tools do: client tools round trip on Chat Completions (with tool_choice and sampling
fields), structured output parsed into a pydantic model, the Responses API (function call,
previous_response_id, streaming), and the errors for what is not served. Prints one JSON object.
Usage: openai_tools_client.py BASE_URL"""
import json
import sys

import openai
import pydantic

base = sys.argv[1]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
seen = {}

weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

# Chat Completions: the model calls the client's tool (and a server tool in the same turn).
messages = [{"role": "user", "content": "What is the weather in Oslo? Check notes.txt too."}]
first = client.chat.completions.create(
    model="agent", messages=messages, tools=[weather], tool_choice="required", temperature=0.3, max_tokens=200
)
choice = first.choices[0]
calls = choice.message.tool_calls or []
seen["chat_first"] = {
    "finish_reason": choice.finish_reason,
    "calls": [{"name": c.function.name, "arguments": json.loads(c.function.arguments)} for c in calls],
    "id_prefix": calls[0].id[:5] if calls else None,
}
messages.append(choice.message.model_dump(exclude_none=True))
for call in calls:
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
second = client.chat.completions.create(model="agent", messages=messages, tools=[weather])
seen["chat_second"] = {"finish_reason": second.choices[0].finish_reason, "content": second.choices[0].message.content}

# Streamed, the calls arrive as deltas and the finish reason says tool_calls.
stream = client.chat.completions.create(
    model="agent", messages=[{"role": "user", "content": "Stream the weather in Rome"}], tools=[weather], stream=True
)
names, finish = [], None
for chunk in stream:
    if chunk.choices:
        for delta in chunk.choices[0].delta.tool_calls or []:
            if delta.function and delta.function.name:
                names.append(delta.function.name)
        finish = chunk.choices[0].finish_reason or finish
seen["chat_stream"] = {"names": names, "finish_reason": finish}


class City(pydantic.BaseModel):
    city: str
    temp: int


# Structured output: the SDK's parse() sends a strict json_schema and parses the answer.
parsed = client.chat.completions.parse(
    model="agent", messages=[{"role": "user", "content": "Structured weather for Oslo"}], response_format=City
)
city = parsed.choices[0].message.parsed
seen["structured"] = {"city": city.city, "temp": city.temp}

# The Responses API: a function call, answered through previous_response_id.
fn_tool = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": weather["function"]["parameters"]}
r1 = client.responses.create(model="agent", input="Responses: weather in Paris?", tools=[fn_tool])
calls = [item for item in r1.output if item.type == "function_call"]
seen["responses_first"] = {"status": r1.status, "calls": [(c.name, json.loads(c.arguments)) for c in calls]}
r2 = client.responses.create(
    model="agent",
    previous_response_id=r1.id,
    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "cloudy"}],
    tools=[fn_tool],
)
seen["responses_second"] = {"status": r2.status, "text": r2.output_text, "tokens": r2.usage.total_tokens}

# Streamed Responses: typed events, text deltas adding up to the completed response's text.
deltas, types, final = [], [], None
with client.responses.stream(model="agent", input="Responses: tell a story", instructions="Be brief.") as events:
    for event in events:
        types.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    final = events.get_final_response()
seen["responses_stream"] = {"text": "".join(deltas), "final": final.output_text, "first": types[0], "last": types[-1]}

# What is not served is refused, naming the field.
def refused(**kwargs):
    try:
        client.chat.completions.create(model=kwargs.pop("model", "agent"), messages=[{"role": "user", "content": "hi"}], **kwargs)
    except openai.BadRequestError as e:
        return {"status": e.status_code, "param": (e.body or {}).get("param"), "message": (e.body or {}).get("message")}
    return None


seen["refused_top_p"] = refused(top_p=0.5)
seen["refused_n"] = refused(n=2)
seen["refused_rlm_tools"] = refused(model="rlm", tools=[weather])

print(json.dumps(seen))
