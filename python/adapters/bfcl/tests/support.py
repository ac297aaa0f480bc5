"""Shared helpers: the samples, a scripted worker, and a trial driver that
runs BFCLHarness as the evalsi_harness shim does (setup, run's events,
check, teardown), without gRPC."""

import copy
import json
import os
import sys
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
# The shim's package (the worker puts it on PYTHONPATH when it runs us).
sys.path.insert(0, str(REPO / "python"))

import evalsi_harness as eh  # noqa: E402

from evalsi_bfcl import BFCLHarness, benchdirect  # noqa: E402,F401

SAMPLES = REPO.parent / "shared" / "benchdata" / "bfcl"

# What harness/external/events.go accepts from a harness.
EVENT_KINDS = {"message", "model_call", "tool_call", "tool_result", "log", "error", "stop", "escalation"}


def require_samples(test):
    """Skips the test when the shared samples are missing (fails under
    EVALSI_STRICT=1, as the Go tests do)."""
    if not (SAMPLES / "BFCL_v4_simple_python.json").exists():
        if os.environ.get("EVALSI_STRICT") == "1":
            test.fail("the BFCL samples are required under EVALSI_STRICT=1: %s is not there" % SAMPLES)
        test.skipTest("no BFCL samples at %s" % SAMPLES)


def records(category, data_dir=SAMPLES):
    """The category's records' metadata, as the bfcl:// importer makes it."""
    return benchdirect.load(str(data_dir), category)


def record(category, entry_id, data_dir=SAMPLES):
    for md in records(category, data_dir):
        if md["bfcl"]["entry"]["id"] == entry_id:
            return copy.deepcopy(md)
    raise KeyError(entry_id)


class NoModel:
    """A worker for the oracle: calling the model is a test failure."""

    def chat(self, *args, **kwargs):
        raise AssertionError("worker.chat called for an oracle trial")

    def exec(self, *args, **kwargs):
        raise AssertionError("worker.exec called: BFCL trials have no sandbox")

    read_file = write_file = exec


class ScriptedWorker(NoModel):
    """Answers chat with the next scripted assistant message (a dict, or a
    function of (messages, tools) returning one); "Done." once the script
    is used up. Records every call's messages, system and tools."""

    def __init__(self, script=()):
        self.script = list(script)
        self.calls = []

    def chat(self, messages, system="", tools=None, max_tokens=0, temperature=None):
        json.dumps(messages)  # what Worker.chat sends must be JSON
        self.calls.append({"messages": copy.deepcopy(messages), "system": system, "tools": copy.deepcopy(tools),
                           "temperature": temperature})
        msg = self.script.pop(0) if self.script else {"role": "assistant", "content": "Done."}
        if callable(msg):
            msg = msg(messages, tools)
        return {"message": copy.deepcopy(msg), "usage": {"input_tokens": 10, "output_tokens": 5},
                "stop_reason": "tool_use" if msg.get("tool_calls") else "end_turn", "model": "scripted",
                "cost_usd": 0.0}


def calls_message(*calls):
    """An assistant message with tool calls: (name, arguments) pairs."""
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": "c%d" % i, "name": n, "arguments": a} for i, (n, a) in enumerate(calls)]}


def text_message(text="Done."):
    return {"role": "assistant", "content": text}


class Run:
    """One trial's outcome: events, result, verdict (None if run raised)."""

    def __init__(self, events, result, verdict, error=None):
        self.events = events
        self.result = result
        self.verdict = verdict
        self.error = error

    @property
    def details(self):
        return json.loads(self.verdict["details"])

    def kinds(self, kind):
        return [e[kind] for e in self.events if e["kind"] == kind]


_trial_seq = [0]


def run_trial(harness, metadata, worker=None, oracle=False, raise_errors=True):
    """Setup, run, check and teardown of one trial, as the shim calls them."""
    _trial_seq[0] += 1
    trial = eh.Trial("trial-%d" % _trial_seq[0], {"metadata": metadata, "oracle": oracle, "record_id": "r",
                                                   "trial": 0, "instruction": "", "input": [], "workdir": "",
                                                   "command_timeout_ms": 0, "model": ""}, worker or NoModel())
    events, result, verdict, error = [], None, None, None
    try:
        harness.setup(trial)
        gen = harness.run(trial)
        try:
            while True:
                ev = next(gen)
                json.dumps(ev)
                events.append(ev)
        except StopIteration as done:
            result = done.value
        verdict = harness.check(trial)
    except Exception as e:  # noqa: BLE001
        if raise_errors:
            raise
        error = e
    finally:
        harness.teardown(trial)
    return Run(events, result, verdict, error)


def parent_instances():
    """BFCL class instances in this process's multi_turn_utils globals, other
    than the tests' own direct checks' ("direct-N" models): a harness's
    trials keep theirs in their child processes."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return [k for k in vars(multi_turn_utils) if k.endswith("_instance") and not k.startswith("direct")]


def assert_events_valid(test, events):
    """The checks harness/external/events.go makes on streamed events."""
    for e in events:
        test.assertIn(e["kind"], EVENT_KINDS, e)
        payloads = [k for k in e if k in EVENT_KINDS or k in ("checker", "policy", "divergence")]
        test.assertEqual(payloads, [e["kind"]], e)
        if e["kind"] == "message":
            test.assertIn(e["message"]["role"], ("system", "user", "assistant", "tool"), e)
        if e["kind"] == "tool_call":
            test.assertTrue(e["tool_call"]["name"], e)
        test.assertGreaterEqual(e.get("step", 0), 0)
        test.assertGreaterEqual(e.get("duration_ms", 0), 0)


class Case(unittest.TestCase):
    harness = None

    @classmethod
    def setUpClass(cls):
        if Case.harness is None:
            Case.harness = BFCLHarness()
