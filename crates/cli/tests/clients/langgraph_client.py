"""Drives a running `recursive serve --graphs DIR` (offering the `approval` graph: write a draft,
ask whether to publish it, publish it) with LangGraph's official Python SDK (`langgraph-sdk`),
as a LangGraph user program would, and prints one JSON object: each SDK call tried and whether
it worked (`ok`, or the error), and what the calls returned.
Usage: langgraph_client.py BASE_URL TOKEN"""
import json
import sys
import time
import traceback

import httpx
from langgraph_sdk import get_sync_client
from langgraph_sdk.schema import Command

base, token = sys.argv[1], sys.argv[2]
client = get_sync_client(url=base, api_key=token)
calls, seen = {}, {}


def call(name, fn):
    """Runs one SDK call, noting whether it worked."""
    try:
        result = fn()
        calls[name] = "ok"
        return result
    except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
        calls[name] = f"{type(e).__name__}: {e}"
        seen.setdefault("tracebacks", {})[name] = traceback.format_exc()[-1500:]
        return None


def parts(stream):
    return [(p.event, p.data) for p in stream]


# 1-2. Assistants: each graph offered is one, by its name.
found = call("assistants.search", lambda: client.assistants.search(limit=10))
if found is not None:
    seen["assistants"] = [(a["assistant_id"], a["graph_id"], a["name"]) for a in found]
    seen["assistants_by_graph"] = len(client.assistants.search(graph_id="approval"))
    seen["assistants_by_other_graph"] = len(client.assistants.search(graph_id="nope"))
got = call("assistants.get", lambda: client.assistants.get("approval"))
if got is not None:
    seen["assistant"] = {"graph_id": got["graph_id"], "description": got["description"]}

# 3-4. A thread of the graph, with metadata.
thread = call("threads.create", lambda: client.threads.create(metadata={"user": "ada"}, graph_id="approval"))
tid = thread["thread_id"] if thread else None
if thread:
    seen["created"] = {"status": thread["status"], "metadata": thread["metadata"]}
got = call("threads.get", lambda: client.threads.get(tid))
if got is not None:
    seen["thread"] = {"thread_id": got["thread_id"], "status": got["status"], "user": got["metadata"].get("user")}

# 5. Stream a run to the graph's question, in two stream modes.
streamed = call(
    "runs.stream",
    lambda: parts(
        client.runs.stream(tid, "approval", input={"topic": "tides"}, stream_mode=["values", "updates"])
    ),
)
if streamed is not None:
    seen["stream_events"] = [event for event, _ in streamed]
    seen["stream_metadata"] = next((d for e, d in streamed if e == "metadata"), None)
    seen["stream_updates"] = [d for e, d in streamed if e == "updates"]
    seen["stream_values"] = [d for e, d in streamed if e == "values"]

# 6. The thread's state: waiting on the question.
state = call("threads.get_state", lambda: client.threads.get_state(tid))
if state is not None:
    seen["state"] = {"values": state["values"], "next": state["next"], "interrupts": state["interrupts"],
                     "checkpoint_id": state["checkpoint"]["checkpoint_id"]}
    seen["thread_interrupted"] = client.threads.get(tid)["status"]

# 7. Answer the question with Command(resume=...), streaming updates.
resumed = call(
    "runs.stream(command=resume)",
    lambda: parts(client.runs.stream(tid, "approval", command=Command(resume="yes"), stream_mode="updates")),
)
if resumed is not None:
    seen["resumed_updates"] = [d for e, d in resumed if e == "updates"]
    seen["resumed_events"] = [e for e, _ in resumed]

# 8. The history, newest first.
history = call("threads.get_history", lambda: client.threads.get_history(tid, limit=10))
if history is not None:
    seen["history"] = [{"next": h["next"], "step": h["metadata"].get("step"), "values": h["values"]} for h in history]
    seen["history_limited"] = len(client.threads.get_history(tid, limit=1))

# 9. Wait for a run on a new thread: it ends at the question, which a second wait answers.
def wait_and_resume():
    other = client.threads.create(graph_id="approval")["thread_id"]
    first = client.runs.wait(other, "approval", input={"topic": "waves"})
    second = client.runs.wait(other, "approval", command={"resume": "no"})
    return first, second


waited = call("runs.wait", wait_and_resume)
if waited is not None:
    seen["wait_interrupted"], seen["wait_resumed"] = waited

# 10. Stateless runs: streamed and waited for, each on a thread of its own.
stateless = call(
    "runs.stream(stateless)",
    lambda: parts(client.runs.stream(None, "approval", input={"topic": "sand"}, stream_mode="values")),
)
if stateless is not None:
    seen["stateless_events"] = [e for e, _ in stateless]
    seen["stateless_last_values"] = [d for e, d in stateless if e == "values"][-1]
waited = call("runs.wait(stateless)", lambda: client.runs.wait(None, "approval", input={"topic": "rocks"}))
if waited is not None:
    seen["stateless_wait"] = waited

# 11. Without the key the server refuses; with a wrong one too.
def refused(key):
    try:
        get_sync_client(url=base, api_key=key).assistants.search()
    except httpx.HTTPStatusError as e:
        return e.response.status_code
    return 200


statuses = call("auth refused without key", lambda: [refused(None), refused("wrong")])
if statuses is not None:
    seen["unauthenticated_statuses"] = statuses

# Beyond the eleven: a background run joined, the thread's runs, thread search, messages.
def create_and_join():
    other = client.threads.create(graph_id="approval", metadata={"user": "bob"})["thread_id"]
    run = client.runs.create(other, "approval", input={"topic": "reefs"})
    joined = client.runs.join(other, run["run_id"])
    listed = client.runs.list(other)
    fetched = client.runs.get(other, run["run_id"])
    client.runs.delete(other, run["run_id"])
    stateless = client.runs.create(None, "approval", input={"topic": "kelp"})
    stateless_values = client.runs.join(stateless["thread_id"], stateless["run_id"])
    return run, joined, listed, fetched, client.runs.list(other), stateless_values


joined = call("runs.create+join+list+get+delete", create_and_join)
if joined is not None:
    run, values, listed, fetched, after_delete, stateless_values = joined
    seen["joined"] = {"status": run["status"] in ("pending", "running"), "values": values,
                      "listed": [r["run_id"] == run["run_id"] for r in listed], "fetched": fetched["status"],
                      "after_delete": len(after_delete), "stateless_draft": stateless_values.get("draft")}
searched = call("threads.search", lambda: client.threads.search(metadata={"user": "ada"}))
if searched is not None:
    seen["searched"] = [t["thread_id"] == tid for t in searched]
    seen["counted"] = client.threads.count(metadata={"user": "ada"})
messages = call(
    "runs.stream(messages-tuple)",
    lambda: parts(client.runs.stream(None, "approval", input={"topic": "dunes"}, stream_mode="messages-tuple")),
)
if messages is not None:
    seen["messages"] = [d for e, d in messages if e == "messages"]

def update_copy_delete():
    updated = client.threads.update(tid, metadata={"reviewed": True})["metadata"]
    copied = client.threads.copy(tid)
    copy_state = client.threads.get_state(copied["thread_id"])
    client.threads.delete(copied["thread_id"])
    try:
        client.threads.get(copied["thread_id"])
        gone = False
    except httpx.HTTPStatusError as e:
        gone = e.response.status_code == 404
    client.threads.update_state(tid, {"draft": "EDITED"}, as_node="approve")
    edited = client.threads.get_state(tid)
    return {"updated": [updated.get("user"), updated.get("reviewed")], "copy_is_new": copied["thread_id"] != tid,
            "copy_values": copy_state["values"], "deleted": gone, "edited": edited["values"].get("draft")}


changed = call("threads.update+copy+delete", update_copy_delete)
if changed is not None:
    seen["changed"] = changed


def refusals():
    """What is not served is refused, never ignored: statuses of each try."""
    def status(fn):
        try:
            result = fn()
            if not isinstance(result, dict):
                list(result)
        except httpx.HTTPStatusError as e:
            return e.response.status_code
        return 200

    return {
        "interrupt_before": status(lambda: client.runs.wait(None, "approval", input={}, interrupt_before=["approve"])),
        "unknown_assistant": status(lambda: client.runs.wait(None, "nope", input={})),
        "debug_mode": status(lambda: client.runs.stream(None, "approval", input={}, stream_mode="debug")),
        "unknown_thread": status(lambda: client.threads.get_state("no-such-thread")),
        "webhook": status(lambda: client.runs.wait(None, "approval", input={}, webhook="http://127.0.0.1:9/x")),
        "input_at_checkpoint": status(lambda: client.runs.wait(tid, "approval", input={"topic": "x"},
                                                                checkpoint_id="any")),
    }


refused = call("refusals", refusals)
if refused is not None:
    seen["refusals"] = refused


def more_modes_and_binding():
    """A thread created without its graph, bound by its first run; the `messages` and `events` modes;
    the state at a checkpoint."""
    bare = client.threads.create(metadata={"user": "cy"})["thread_id"]
    streamed = parts(client.runs.stream(bare, "approval", input={"topic": "moss"}, stream_mode=["messages", "events"]))
    state = client.threads.get_state(bare)
    first = client.threads.get_history(bare)[-1]["checkpoint"]["checkpoint_id"]
    earlier = client.threads.get_state(bare, checkpoint_id=first)
    return {
        "bound_graph": client.threads.get(bare)["metadata"].get("graph_id"),
        "draft": state["values"]["draft"],
        "message_events": [e for e, _ in streamed if e.startswith("messages")],
        "complete": [d[0]["content"] for e, d in streamed if e == "messages/complete"],
        "events": sorted({d["event"] for e, d in streamed if e == "events"}),
        "earlier_next": earlier["next"],
    }


more = call("threads.create without graph + messages/events modes + state at checkpoint", more_modes_and_binding)
if more is not None:
    seen["more"] = more


def cancelled():
    """A run whose model is slow, cancelled and waited for."""
    slow = client.threads.create(graph_id="approval")["thread_id"]
    run = client.runs.create(slow, "approval", input={"topic": "slowness"})
    busy = client.threads.get(slow)["status"]
    client.runs.cancel(slow, run["run_id"], wait=True)
    return {"busy": busy, "status": client.runs.get(slow, run["run_id"])["status"],
            "after": client.threads.get(slow)["status"]}


def disconnected():
    """A stateless stream closed by its client while the model is slow: the run is cancelled."""
    stream = client.runs.stream(None, "approval", input={"topic": "slowness"}, stream_mode="values")
    run_id = next(stream).data["run_id"]
    next(stream)  # the input's values
    stream.close()
    started = time.time()
    while time.time() - started < 15:
        view = httpx.get(f"{base}/v1/runs/{run_id}", headers={"x-api-key": token}).json()
        if view["status"] == "finished":
            return view["result"]["outcome"]
        time.sleep(0.1)
    return "still running"


def joined_stream():
    """A background run whose model takes a second, followed with join_stream."""
    other = client.threads.create(graph_id="approval")["thread_id"]
    run = client.runs.create(other, "approval", input={"topic": "patience"}, stream_mode=["updates"])
    followed = parts(client.runs.join_stream(other, run["run_id"]))
    again = client.runs.create(other, "approval", command={"resume": "no"})
    in_values = parts(client.runs.join_stream(other, again["run_id"], stream_mode="values"))
    return followed, [e for e, _ in in_values], let_go(other, run["run_id"])


def let_go(thread, run_id):
    """The ended run joined once the runs API has written it away and let it go: it then tells
    how the thread stands (the resume's answer) instead of replaying the run (polled, 15 s)."""
    started = time.time()
    while True:
        ended = parts(client.runs.join_stream(thread, run_id, stream_mode="values"))
        values = [data for event, data in ended if event == "values"]
        if (values and values[-1].get("answer") == "no") or time.time() - started > 15:
            return ended
        time.sleep(0.1)


followed = call("runs.join_stream", joined_stream)
if followed is not None:
    seen["join_stream"] = followed

gone = call("stream closed by its client", disconnected)
if gone is not None:
    seen["disconnected"] = gone

cancel = call("runs.cancel", cancelled)
if cancel is not None:
    seen["cancelled"] = cancel


def agent_runs():
    """The served agent as an assistant: stateless, on a conversation."""
    waited = client.runs.wait(None, "agent", input={"messages": [{"role": "user", "content": "Say hello"}]})
    streamed = parts(client.runs.stream(None, "agent", input={"messages": [{"type": "human", "content": "Say hello"}]},
                                        stream_mode=["messages-tuple", "values"]))
    try:
        client.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "Say hello"}]})
        on_thread = 200
    except httpx.HTTPStatusError as e:
        on_thread = e.response.status_code
    return {
        "waited": [(m["type"], m["content"]) for m in waited["messages"]],
        "streamed_text": "".join(d[0]["content"] for e, d in streamed if e == "messages"),
        "streamed_last": [(m["type"], m["content"]) for m in [d for e, d in streamed if e == "values"][-1]["messages"]],
        "on_thread": on_thread,
    }


agent = call("runs (agent assistant)", agent_runs)
if agent is not None:
    seen["agent"] = agent


def async_client():
    """The asynchronous client (what most LangGraph programs use): the same calls."""
    import asyncio

    from langgraph_sdk import get_client

    async def go():
        aclient = get_client(url=base, api_key=token)
        names = [a["assistant_id"] for a in await aclient.assistants.search()]
        thread = (await aclient.threads.create(graph_id="approval"))["thread_id"]
        events = [p.event async for p in aclient.runs.stream(thread, "approval", input={"topic": "tides"},
                                                              stream_mode="updates")]
        resumed = await aclient.runs.wait(thread, "approval", command={"resume": "yes"})
        return {"assistants": names, "events": events, "resumed": resumed["draft"]}

    return asyncio.run(go())


asynced = call("async client", async_client)
if asynced is not None:
    seen["async"] = asynced


# The store.
def store_round_trip():
    client.store.put_item(["users", "ada"], "prefs", {"theme": "dark", "lang": "en"})
    client.store.put_item(["users", "bob"], "prefs", {"theme": "light"})
    item = client.store.get_item(["users", "ada"], key="prefs")
    found = client.store.search_items(["users"], filter={"theme": "dark"})
    queried = client.store.search_items(["users"], query="light")
    spaces = client.store.list_namespaces(prefix=["users"])
    client.store.delete_item(["users", "bob"], "prefs")
    try:
        client.store.get_item(["users", "bob"], key="prefs")
        gone = False
    except httpx.HTTPStatusError as e:
        gone = e.response.status_code == 404
    return {"item": item["value"], "found": [i["key"] + "@" + ".".join(i["namespace"]) for i in found["items"]],
            "queried": [".".join(i["namespace"]) for i in queried["items"]], "namespaces": spaces["namespaces"],
            "deleted": gone}


store = call("store", store_round_trip)
if store is not None:
    seen["store"] = store

print(json.dumps({"calls": calls, "seen": seen}, default=str))
