# The CPython worker of the RLM: one persistent REPL namespace, fed snippets by the host over
# JSON lines on stdin/stdout. Host functions (llm_query, submit, host tools...) are stubs that
# send a call to the host and wait for its answer; their async aliases (`await llm_query(...)`,
# `asyncio.gather`) send the call and await a future, so several can be in flight at once.
#
# Host -> worker: {"op": "init", "limits": {...}, "host_functions": [...], "async_prefix": "...",
#                  "globals": {...}, "texts": {...}, "setup": "..."}
#                 {"op": "exec", "code": "..."}
#                 {"op": "answer", "id": N, "value": ...} | {"op": "answer", "id": N, "error": [type, msg]}
#                 {"op": "answer", "id": N, "finish": true}
#                 {"op": "interrupt"}  (a KeyboardInterrupt in the running snippet, if one runs)
# Worker -> host: {"op": "ready"} | {"op": "call", "id": N, "name": ..., "args": [...], "kwargs": {...},
#                  "awaited": bool} | {"op": "done", "stdout": ..., "dropped": N, "value": repr|None,
#                  "error": [kind, text]|None}
import ast
import asyncio
import builtins
import io
import json
import os
import signal
import sys
import threading
import traceback

_out = sys.stdout
_in = sys.stdin
_write_lock = threading.Lock()
_pending = {}
_pending_lock = threading.Lock()
_next_id = [0]
_limits = {}
# Whether a snippet runs: an interrupt outside one is ignored.
_running = [False]


class _Submitted(BaseException):
    """Ends the snippet: the host took the payload of a finishing call."""


class _SnippetTimeout(BaseException):
    pass


def _send(message):
    line = json.dumps(message, default=repr)
    with _write_lock:
        _out.write(line + "\n")
        _out.flush()


class _Capped(io.TextIOBase):
    """Printed output, head and tail kept within the limit."""

    def __init__(self, limit):
        self.limit = limit
        self.head = []
        self.head_len = 0
        self.tail = ""
        self.dropped = 0

    def write(self, text):
        if not isinstance(text, str):
            text = str(text)
        half = self.limit // 2
        if self.head_len < half:
            take = text[: half - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            text = text[len(take):]
        if text:
            self.tail += text
            if len(self.tail) > self.limit - half:
                cut = len(self.tail) - (self.limit - half)
                self.dropped += cut
                self.tail = self.tail[cut:]
        return len(text)

    def text(self):
        return "".join(self.head) + self.tail


class _Waiter:
    def __init__(self, loop=None, future=None):
        self.event = threading.Event()
        self.loop = loop
        self.future = future
        self.answer = None

    def deliver(self, answer):
        self.answer = answer
        if self.future is not None:
            self.loop.call_soon_threadsafe(_settle, self.future, answer)
        self.event.set()


def _settle(future, answer):
    if not future.done():
        future.set_result(answer)


def _reader():
    """Reads answers to host calls; hands `exec` requests to the main thread."""
    for line in _in:
        message = json.loads(line)
        if message.get("op") == "interrupt":
            if _running[0]:
                os.kill(os.getpid(), signal.SIGINT)
        elif message.get("op") == "answer":
            with _pending_lock:
                waiter = _pending.pop(message["id"], None)
            if waiter is not None:
                waiter.deliver(message)
        else:
            _requests.put(message)
    _requests.put(None)


def _exception(kind, text):
    cls = getattr(builtins, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    return cls(text)


def _outcome(answer):
    if answer.get("finish"):
        raise _Submitted()
    if "error" in answer:
        kind, text = answer["error"]
        raise _exception(kind, text)
    return answer.get("value")


def _register(waiter):
    with _pending_lock:
        _next_id[0] += 1
        call_id = _next_id[0]
        _pending[call_id] = waiter
    return call_id


def _make_host_function(name):
    def call(*args, **kwargs):
        waiter = _Waiter()
        call_id = _register(waiter)
        _send({"op": "call", "id": call_id, "name": name, "args": list(args), "kwargs": kwargs, "awaited": False})
        waiter.event.wait()
        return _outcome(waiter.answer)

    call.__name__ = name
    return call


def _make_async_host_function(name):
    async def call(*args, **kwargs):
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, loop.create_future())
        call_id = _register(waiter)
        _send({"op": "call", "id": call_id, "name": name, "args": list(args), "kwargs": kwargs, "awaited": True})
        return _outcome(await waiter.future)

    call.__name__ = name
    return call


_namespace = {"__name__": "__main__", "__builtins__": builtins}


_host_names = set()
_async_prefix = ""


class _AsyncCalls(ast.NodeTransformer):
    """Points host calls that are awaited, or handed to `gather`/`create_task` (directly, in a
    comprehension, or through a list later passed to `gather`), at their async aliases."""

    def __init__(self, task_lists):
        self.task_lists = task_lists
        self.depth = 0

    def _rename(self, node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _host_names:
            node.func = ast.copy_location(ast.Name(_async_prefix + node.func.id, ast.Load()), node.func)
        return node

    def visit_Await(self, node):
        self.generic_visit(node)
        node.value = self._rename(node.value)
        return node

    def visit_Call(self, node):
        name = _callee(node)
        if name in ("gather", "create_task", "ensure_future", "wait_for"):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
        elif name == "append" and isinstance(node.func, ast.Attribute) and _target_name(node.func.value) in self.task_lists:
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
        else:
            self.generic_visit(node)
        return self._rename(node) if self.depth and name in _host_names else node

    def visit_Assign(self, node):
        if any(_target_name(t) in self.task_lists for t in node.targets):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1
            return node
        return self.generic_visit(node)


def _callee(call):
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _target_name(node):
    return node.id if isinstance(node, ast.Name) else None


def _task_lists(tree):
    """Names passed to `gather` as `*name` or `name`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) == "gather":
            for arg in node.args:
                inner = arg.value if isinstance(arg, ast.Starred) else arg
                if isinstance(inner, ast.Name):
                    names.add(inner.id)
    return names


def _run(code):
    """Runs a snippet as a REPL would: the value of a final expression is reported."""
    tree = ast.parse(code, "<snippet>", "exec")
    tree = ast.fix_missing_locations(_AsyncCalls(_task_lists(tree)).visit(tree))
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    body = compile(tree, "<snippet>", "exec", flags=flags)
    _maybe_await(eval(body, _namespace))
    if last is not None:
        return _maybe_await(eval(compile(last, "<snippet>", "eval", flags=flags), _namespace))
    return None


def _maybe_await(result):
    if asyncio.iscoroutine(result):
        return asyncio.run(result)
    return result


def _on_alarm(signum, frame):
    raise _SnippetTimeout()


def _on_interrupt(signum, frame):
    if _running[0]:
        raise KeyboardInterrupt()


def _execute(code):
    captured = _Capped(_limits.get("max_output_chars", 100000))
    sys.stdout = captured
    sys.stderr = captured
    value = None
    error = None
    seconds = _limits.get("timeout_secs")
    if seconds:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        _running[0] = True
        result = _run(code)
        if result is not None:
            value = repr(result)
    except _Submitted:
        pass
    except _SnippetTimeout:
        error = ["timeout", "TimeoutError: the snippet ran past its time limit of %gs" % seconds]
    except SyntaxError as e:
        error = ["syntax", "".join(traceback.format_exception_only(type(e), e)).strip()]
    except MemoryError:
        error = ["memory", "MemoryError: the snippet went over its memory limit"]
    except RecursionError as e:
        error = ["recursion", "RecursionError: %s" % e]
    except BaseException as e:  # noqa: BLE001 - every failure is reported to the model
        frames = traceback.extract_tb(e.__traceback__)
        frames = [f for f in frames if f.filename == "<snippet>"]
        text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
        text += "".join(traceback.format_exception_only(type(e), e))
        error = ["exception", text.strip()]
    finally:
        _running[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout = _out
        sys.stderr = sys.__stderr__
    _send({"op": "done", "stdout": captured.text(), "dropped": captured.dropped, "value": value, "error": error})


def _init(message):
    global _limits
    _limits = message["limits"]
    sys.setrecursionlimit(max(50, int(_limits.get("recursion_limit", 1000))))
    global _async_prefix
    prefix = _async_prefix = message["async_prefix"]
    _host_names.update(message["host_functions"])
    for name in message["host_functions"]:
        _namespace[name] = _make_host_function(name)
        _namespace[prefix + name] = _make_async_host_function(name)
    _namespace.update(message["globals"])
    _namespace.update(message["texts"])
    exec(compile(message["setup"], "<setup>", "exec"), _namespace)


def main():
    import queue

    global _requests
    _requests = queue.Queue()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, _on_interrupt)
    threading.Thread(target=_reader, daemon=True).start()
    while True:
        message = _requests.get()
        if message is None:
            return
        if message["op"] == "init":
            try:
                _init(message)
                _send({"op": "ready"})
            except BaseException as e:  # noqa: BLE001
                _send({"op": "failed", "error": "".join(traceback.format_exception_only(type(e), e)).strip()})
        elif message["op"] == "exec":
            _execute(message["code"])


if __name__ == "__main__":
    os.environ.pop("PYTHONSTARTUP", None)
    main()
