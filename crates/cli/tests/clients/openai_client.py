"""Drives a running `recursive serve` with the official OpenAI Python SDK and httpx, as a user
program would, and prints one JSON object of what it saw. Usage: openai_client.py BASE_URL TOKEN"""
import base64
import json
import sys

import httpx
import openai

base, token = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key=token or "unused", max_retries=0)
seen = {}

seen["models"] = sorted(m.id for m in client.models.list())

reply = client.chat.completions.create(model="agent", messages=[{"role": "user", "content": "say hello"}])
seen["agent"] = {
    "content": reply.choices[0].message.content,
    "finish_reason": reply.choices[0].finish_reason,
    "total_tokens": reply.usage.total_tokens,
}

stream = client.chat.completions.create(
    model="agent",
    messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hello"}],
    stream=True,
    stream_options={"include_usage": True},
)
parts, finish, usage = [], None, None
for chunk in stream:
    if chunk.choices:
        parts.append(chunk.choices[0].delta.content or "")
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage:
        usage = chunk.usage.total_tokens
seen["agent_stream"] = {"content": "".join(parts), "chunks": len(parts), "finish_reason": finish, "usage": usage}

reply = client.chat.completions.create(
    model="rlm",
    messages=[{"role": "user", "content": [
        {"type": "text", "text": "How many words are in the notes?"},
        {"type": "text", "text": "alpha beta gamma delta"},
    ]}],
)
seen["rlm"] = reply.choices[0].message.content

reply = client.chat.completions.create(
    model="rlm",
    messages=[{"role": "user", "content": [
        {"type": "text", "text": "Count the words of the attached file"},
        {"type": "file", "file": {"filename": "notes.txt",
                                  "file_data": "data:text/plain;base64," + base64.b64encode(b"one two three").decode()}},
    ]}],
)
seen["rlm_file"] = reply.choices[0].message.content

stream = client.chat.completions.create(
    model="rlm", messages=[{"role": "user", "content": "alpha beta gamma delta"}], stream=True
)
seen["rlm_stream"] = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)

try:
    client.chat.completions.create(model="gpt-nope", messages=[{"role": "user", "content": "x"}])
    seen["unknown_model"] = "accepted"
except openai.NotFoundError as e:
    seen["unknown_model"] = e.body.get("message") if isinstance(e.body, dict) else str(e)

# The runs API: start a run, then read its events as Server-Sent Events to the final event,
# then once more from after the second event (Last-Event-ID).
headers = {"Authorization": "Bearer " + token} if token else {}
with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
    run = http.post("/v1/runs", json={"kind": "run", "input": "say hello"}).json()
    events = []
    with http.stream("GET", f"/v1/runs/{run['id']}/events") as response:
        event, ident = None, None
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("id:"):
                ident = line[3:].strip()
            elif line.startswith("data:"):
                events.append({"event": event, "id": ident, "data": json.loads(line[5:])})
                if event == "end":
                    break
    seen["events"] = [e["event"] for e in events]
    seen["end"] = events[-1]["data"]["run"]["result"]
    resumed = []
    with http.stream("GET", f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": "1"}) as response:
        for line in response.iter_lines():
            if line.startswith("id:"):
                resumed.append(int(line[3:].strip()))
            if line.startswith("event: end"):
                break
    seen["resumed_ids"] = resumed
    seen["status"] = http.get(f"/v1/runs/{run['id']}").json()["status"]

    # A file uploaded with the run becomes an input.
    run = http.post(
        "/v1/runs",
        data={"kind": "rlm", "input": "Count the words of the uploaded file"},
        files={"file": ("report.txt", b"a b c d e", "text/plain")},
    ).json()
    for _ in range(200):
        view = http.get(f"/v1/runs/{run['id']}").json()
        if view["status"] == "finished":
            break
        __import__("time").sleep(0.05)
    seen["upload"] = view["result"]["text"]

print(json.dumps(seen))
