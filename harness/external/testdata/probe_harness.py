"""The conformance probe harness in Python: the twin of
harness/internal/probe (see there for the modes)."""

import os
import threading

import evalsi_harness as eh

EVENT_COUNT = 5
CALLS_FILE = "probe-calls.txt"


class ProbeHarness:
    def __init__(self):
        self.lock = threading.Lock()

    def describe(self):
        return {"name": "probe", "version": "1.0.0", "capabilities": ["check"]}

    def _add(self, trial, call):
        with self.lock:
            trial.state.append(call)

    def setup(self, trial):
        trial.state = []
        self._add(trial, "setup")
        if _mode(trial) == "fail-setup":
            raise RuntimeError("probe: setup fails as asked")

    def run(self, trial):
        self._add(trial, "run")
        mode = _mode(trial)
        if mode in ("ok", "fail-teardown"):
            out = trial.worker.exec(["/bin/sh", "-c", "echo probe"]).stdout.decode().strip()
            for i in range(1, EVENT_COUNT + 1):
                text = "probe event %d" % i
                if i == 1:
                    text += ": " + out
                yield eh.log(text, step=i)
            yield eh.message({"role": "assistant", "content": "probe done"}, step=EVENT_COUNT)
            return {"output": "probe done", "stop_reason": "answered"}
        if mode in ("fail-run", "die-run"):
            for i in (1, 2):
                yield eh.log("probe event %d" % i)
            if mode == "die-run":
                os._exit(3)
            raise RuntimeError("probe: run fails as asked")
        if mode == "hang":
            yield eh.log("hanging")
            trial.cancelled.wait(60)
            raise RuntimeError("probe: canceled")
        if mode == "env":
            yield eh.log("OPENAI_API_KEY=" + os.environ.get("OPENAI_API_KEY", ""))
            return {"output": "env", "stop_reason": "answered"}
        if mode == "timeout":
            r = trial.worker.exec(["sleep", "30"], timeout_ms=200)
            yield eh.log("timed out: %s" % ("true" if r.timed_out else "false"))
            return {"output": "slept", "stop_reason": "answered"}
        if mode == "bad-event":
            yield {"kind": "checker", "checker": {"pass": True, "score": 1, "exit_code": 0}}
            return {"output": "forged", "stop_reason": "answered"}
        raise RuntimeError("probe: unknown mode %r" % mode)

    def check(self, trial):
        self._add(trial, "check")
        return {"pass": True, "score": 0.75, "details": "probe verdict"}

    def teardown(self, trial):
        self._add(trial, "teardown")
        with self.lock:
            calls = ",".join(trial.state)
        trial.worker.write_file(CALLS_FILE, calls)
        if _mode(trial) == "fail-teardown":
            raise RuntimeError("probe: teardown fails as asked")


def _mode(trial):
    words = trial.task["instruction"].split()
    return words[0] if words else ""
