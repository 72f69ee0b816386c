"""Drives a running `recursive serve` with the official OpenAI Python SDK (and the standard
library for the runs API), as a user program would, and prints one JSON object of what it saw.
Usage: openai_client.py BASE_URL TOKEN"""
import base64
import http.client
import json
import sys
import time

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

# The runs API, with nothing but the standard library: start a run, read its events as
# Server-Sent Events to the final event, then once more from after the second event
# (Last-Event-ID); then a file uploaded as a form.
host, port = base.removeprefix("http://").split(":")
headers = {"Authorization": "Bearer " + token} if token else {}


def request(method, path, body=None, extra=None, content_type="application/json"):
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    conn.request(method, path, body=data, headers={**headers, "Content-Type": content_type, **(extra or {})})
    return conn, conn.getresponse()


def events(path, extra=None):
    conn, response = request("GET", path, extra=extra)
    out, event, ident = [], None, None
    while True:
        line = response.readline().decode().rstrip("\r\n")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("id:"):
            ident = line[3:].strip()
        elif line.startswith("data:"):
            out.append({"event": event, "id": ident, "data": json.loads(line[5:])})
            if event == "end":
                break
        elif not line and response.isclosed():
            break
    conn.close()
    return out


def get_json(method, path, body=None, content_type="application/json"):
    conn, response = request(method, path, body, content_type=content_type)
    value = json.loads(response.read())
    conn.close()
    return value


run = get_json("POST", "/v1/runs", {"kind": "run", "input": "say hello"})
got = events(f"/v1/runs/{run['id']}/events")
seen["events"] = [e["event"] for e in got]
seen["end"] = got[-1]["data"]["run"]["result"]
resumed = events(f"/v1/runs/{run['id']}/events", {"Last-Event-ID": "1"})
seen["resumed_ids"] = [int(e["id"]) for e in resumed if e["id"] is not None]
seen["status"] = get_json("GET", f"/v1/runs/{run['id']}")["status"]

boundary = "recursive-test-boundary"
form = (
    f"--{boundary}\r\nContent-Disposition: form-data; name=\"kind\"\r\n\r\nrlm\r\n"
    f"--{boundary}\r\nContent-Disposition: form-data; name=\"input\"\r\n\r\nCount the words of the uploaded file\r\n"
    f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"report.txt\"\r\n"
    f"Content-Type: text/plain\r\n\r\na b c d e\r\n--{boundary}--\r\n"
).encode()
run = get_json("POST", "/v1/runs", form, content_type=f"multipart/form-data; boundary={boundary}")
for _ in range(200):
    view = get_json("GET", f"/v1/runs/{run['id']}")
    if view["status"] == "finished":
        break
    time.sleep(0.05)
seen["upload"] = view["result"]["text"]

print(json.dumps(seen))
