"""An example Evals.si external harness in Python: a minimal tool-calling
loop (bash, read_file, write_file) that asks the model through the worker,
runs its tool calls in the trial's sandbox through the worker, streams every
step as a trajectory event, and stops when the model answers without a tool
call. Its check runs the tests and passes when they pass.

Use it with:

    harness:
      external:
        python: evalsi_harness.examples.fixcalc:FixCalcHarness
"""

import json
import posixpath
import time

import evalsi_harness as eh

MAX_STEPS = 30

TOOLS = [
    {"name": "bash", "description": "Run a shell command in the working directory; returns the exit code and output.",
     "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"name": "read_file", "description": "Read a file (relative to the working directory).",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "write_file", "description": "Replace a file's contents (relative to the working directory).",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}},
]


class FixCalcHarness:
    def describe(self):
        return {"name": "pyfixcalc", "version": "0.1.0", "capabilities": ["check"]}

    def run(self, trial):
        task, worker = trial.task, trial.worker
        workdir = task["workdir"]
        system = ("You are a careful software engineer. Work in %s with the bash, read_file and write_file "
                  "tools; answer without a tool call when done." % workdir)
        msgs = list(task["input"]) or [{"role": "user", "content": task["instruction"]}]
        yield eh.message({"role": "system", "content": system})
        for m in msgs:
            yield eh.message(m)
        output = ""
        for step in range(1, MAX_STEPS + 1):
            start = time.monotonic()
            resp = worker.chat(msgs, system=system, tools=TOOLS)
            yield eh.model_call(resp["model"], resp["usage"], resp["cost_usd"], resp["stop_reason"], step=step,
                                duration_ms=(time.monotonic() - start) * 1000)
            msg = dict(resp["message"], role="assistant")
            calls = msg.get("tool_calls") or []
            for i, call in enumerate(calls):
                if not call.get("id"):
                    call["id"] = "call_%d_%d" % (step, i)
            msgs.append(msg)
            yield eh.message(msg, step=step)
            if msg.get("content"):
                output = msg["content"]
            if not calls:
                return {"output": output, "stop_reason": "answered"}
            for call in calls:
                yield eh.tool_call(call, step=step)
                start = time.monotonic()
                result = self._tool(worker, workdir, task["command_timeout_ms"], call)
                yield eh.tool_result(call["id"], call["name"], step=step,
                                     duration_ms=(time.monotonic() - start) * 1000, **result)
                msgs.append({"role": "tool", "content": result["output"], "tool_call_id": call["id"],
                             "name": call["name"]})
        return {"output": output, "stop_reason": "max_steps"}

    def _tool(self, worker, workdir, timeout_ms, call):
        """Runs one call. The model's mistakes come back as error results;
        a failing worker or sandbox raises, which fails the trial."""
        args = call.get("arguments") or {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError as e:
                return {"output": "arguments are not JSON: %s" % e, "is_error": True}
        path = args.get("path", "")
        if path and not path.startswith("/"):
            path = posixpath.join(workdir, path)
        name = call.get("name")
        try:
            if name == "bash" and args.get("command"):
                r = worker.exec(["/bin/sh", "-c", args["command"]], workdir=workdir, timeout_ms=timeout_ms)
                out = "exit code: %d\nstdout:\n%s\nstderr:\n%s" % (
                    r.exit_code, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace"))
                return {"output": out, "exit_code": r.exit_code}
            if name == "read_file" and path:
                return {"output": worker.read_file(path).decode(errors="replace")}
            if name == "write_file" and path and "content" in args:
                worker.write_file(path, args["content"])
                return {"output": "wrote %d bytes to %s" % (len(args["content"].encode()), path)}
        except eh.WorkerError as e:
            if name == "bash":
                raise
            return {"output": str(e), "is_error": True}
        return {"output": "unknown tool %r or missing arguments; the tools are bash(command), read_file(path), "
                          "write_file(path, content)" % name, "is_error": True}

    def check(self, trial):
        r = trial.worker.exec(["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], workdir=trial.task["workdir"])
        lines = r.stdout.decode(errors="replace").strip().splitlines()
        passed = r.exit_code == 0
        return {"pass": passed, "score": 1.0 if passed else 0.0, "details": lines[-1] if lines else ""}
