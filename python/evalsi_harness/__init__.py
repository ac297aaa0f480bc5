"""evalsi_harness hosts an Evals.si external harness written in Python.

The worker starts it for ``harness.external.python: module:Class`` as::

    python3 -m evalsi_harness --socket PATH --class module:Class

It serves the harness protocol (harness.proto, package evalsi.harness.v1) on
the unix socket PATH and forwards each call to an instance of Class (made
with no arguments). The class implements, per trial:

- ``describe(self) -> dict``: ``{"name", "version", "capabilities"}``
  (optional; capabilities default to ``["check"]`` when the class has
  ``check``);
- ``setup(self, trial)`` (optional);
- ``run(self, trial)``: a generator that yields trajectory events (dicts in
  the JSON shape of trajectory.Event; see the helpers below) and returns
  ``{"output": str, "stop_reason": str}``;
- ``check(self, trial) -> dict | None`` (optional): ``{"pass", "score",
  "details"}``, the harness's own verdict;
- ``teardown(self, trial)`` (optional): always called after setup.

``trial`` is a Trial: ``trial.id``, ``trial.task`` (a dict: record_id,
trial, instruction, input, workdir, command_timeout_ms, model, metadata
(the record's metadata, a dict) and oracle (True when the run's target is
the oracle agent: answer with the task's reference solution, since
``worker.chat`` fails)),
``trial.worker`` (a Worker: the trial's sandbox and model),
``trial.cancelled`` (a threading.Event set when the worker cancels the run)
and ``trial.state`` for the class's own use. Methods may be called for several
trials at once, from several threads.
"""

import json
import threading

import grpc

from evalsi_harness import harness_pb2 as pb
from evalsi_harness import harness_pb2_grpc as pbgrpc

PROTOCOL_VERSION = "1"

__all__ = ["PROTOCOL_VERSION", "Trial", "Worker", "WorkerError", "ExecResult",
           "message", "model_call", "tool_call", "tool_result", "log", "error", "stop"]


class WorkerError(Exception):
    """A Worker call failed; ``code`` is the grpc.StatusCode (NOT_FOUND for
    a missing file is the model's mistake, INTERNAL the sandbox failing)."""

    def __init__(self, op, err):
        self.code = err.code() if hasattr(err, "code") else None
        detail = err.details() if hasattr(err, "details") else str(err)
        super().__init__("%s: %s" % (op, detail))


class ExecResult:
    """How a command ended in the sandbox."""

    def __init__(self, resp):
        self.exit_code = resp.exit_code
        self.stdout = resp.stdout
        self.stderr = resp.stderr
        self.truncated = resp.truncated
        self.timed_out = resp.timed_out
        self.duration_ms = resp.duration_ms
        self.denials = [{"kind": d.kind, "detail": d.detail} for d in resp.denials]


class Worker:
    """The trial's sandbox and model, reached through the worker."""

    def __init__(self, address):
        self._channel = grpc.insecure_channel(address)
        self._stub = pbgrpc.WorkerStub(self._channel)

    def close(self):
        self._channel.close()

    def exec(self, argv, workdir="", env=None, stdin=b"", timeout_ms=0):
        """Runs argv in the sandbox; a non-zero exit is a result."""
        try:
            resp = self._stub.Exec(pb.ExecRequest(argv=list(argv), env=env or {}, workdir=workdir,
                                                  stdin=stdin, timeout_ms=timeout_ms))
        except grpc.RpcError as e:
            raise WorkerError("exec", e) from None
        return ExecResult(resp)

    def read_file(self, path):
        """Returns the file's bytes; relative paths are in the workdir."""
        try:
            return self._stub.ReadFile(pb.ReadFileRequest(path=path)).data
        except grpc.RpcError as e:
            raise WorkerError("read_file " + path, e) from None

    def write_file(self, path, data, mode=0o644):
        """Writes data (bytes or str), creating parent directories."""
        if isinstance(data, str):
            data = data.encode()
        try:
            self._stub.WriteFile(pb.WriteFileRequest(path=path, data=data, mode=mode))
        except grpc.RpcError as e:
            raise WorkerError("write_file " + path, e) from None

    def chat(self, messages, system="", tools=None, max_tokens=0, temperature=None):
        """One call of the run's target model.

        messages: list of trajectory messages (dicts with role, content,
        tool_calls, tool_call_id, name). tools: list of {"name",
        "description", "parameters"} with parameters a JSON Schema dict.
        Returns {"message", "usage": {"input_tokens", "output_tokens"},
        "stop_reason", "model", "cost_usd"}.
        """
        req = pb.ChatRequest(system=system, messages_json=json.dumps(messages).encode(), max_tokens=max_tokens)
        if temperature is not None:
            req.temperature = temperature
        for t in tools or []:
            req.tools.append(pb.Tool(name=t["name"], description=t.get("description", ""),
                                     parameters_json=json.dumps(t.get("parameters", {"type": "object"})).encode()))
        try:
            resp = self._stub.Chat(req)
        except grpc.RpcError as e:
            raise WorkerError("chat", e) from None
        return {
            "message": json.loads(resp.message_json),
            "usage": {"input_tokens": resp.input_tokens, "output_tokens": resp.output_tokens},
            "stop_reason": resp.stop_reason,
            "model": resp.model,
            "cost_usd": resp.cost_usd,
        }


class Trial:
    """One trial as the harness sees it."""

    def __init__(self, trial_id, task, worker):
        self.id = trial_id
        self.task = task
        self.worker = worker
        self.state = None
        # Set when the worker cancels the run (the trial's time is up or
        # the run is interrupted): a long run should check it and stop.
        self.cancelled = threading.Event()


# Event helpers: each returns a dict in the JSON shape of trajectory.Event.

def _event(kind, payload, step=0, duration_ms=0):
    e = {"kind": kind, kind: payload}
    if step:
        e["step"] = step
    if duration_ms:
        e["duration_ms"] = int(duration_ms)
    return e


def message(msg, step=0):
    """msg: {"role", "content", "tool_calls"?, "tool_call_id"?, "name"?}."""
    return _event("message", msg, step)


def model_call(model, usage, cost_usd=0.0, stop_reason="", step=0, duration_ms=0):
    return _event("model_call", {"model": model, "usage": usage, "cost_usd": cost_usd,
                                 "stop_reason": stop_reason, "role": "agent"}, step, duration_ms)


def tool_call(call, step=0):
    """call: {"id", "name", "arguments"} with arguments a JSON object."""
    return _event("tool_call", call, step)


def tool_result(call_id, name, output, is_error=False, exit_code=None, step=0, duration_ms=0):
    r = {"call_id": call_id, "name": name, "output": output}
    if is_error:
        r["is_error"] = True
    if exit_code is not None:
        r["exit_code"] = exit_code
    return _event("tool_result", r, step, duration_ms)


def log(text, step=0):
    return _event("log", {"text": text}, step)


def error(kind, msg, step=0):
    return _event("error", {"kind": kind, "message": msg}, step)


def stop(reason, detail="", step=0):
    s = {"reason": reason}
    if detail:
        s["detail"] = detail
    return _event("stop", s, step)
