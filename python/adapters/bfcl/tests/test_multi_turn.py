"""Multi-turn: BFCL's loop and checker, the call checks in front of BFCL's
eval, the per-trial child's limits, and held-out functions."""

import copy
import json
import os
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor

import support
from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC, MAXIMUM_STEP_LIMIT
from bfcl_eval.eval_checker import eval_runner

from evalsi_bfcl import BFCLHarness, harness, oracle, sandbox
from evalsi_bfcl.decode import FCDecoder
from evalsi_bfcl.entry import Entry
from evalsi_bfcl.verdict import summary


def gt_calls(md, turn):
    """A turn's ground-truth calls as (name, arguments) pairs."""
    e = Entry(md)
    return [oracle._parse_gt_call(e, src) for src in e.answer[turn]]


def script_from(turn_calls):
    """A scripted model that makes each turn's calls in one step, then
    answers in text; turn_calls: per turn a list of (name, arguments)."""
    out = []
    for calls in turn_calls:
        if calls:
            out.append(support.calls_message(*calls))
        out.append(support.text_message())
    return out


_direct_seq = [0]


def direct_check(md, turn_calls):
    """BFCL's eval_runner grading the same calls in this process (instances
    under a model name of their own, so nothing is shared)."""
    _direct_seq[0] += 1
    model_result = [[[{n: a} for n, a in calls], []] if calls else [[]] for calls in turn_calls]
    e = md["bfcl"]["entry"]
    return summary(eval_runner._evaluate_single_multi_turn_entry(
        FCDecoder(), e["id"], model_result, md["bfcl"]["answer"]["ground_truth"], copy.deepcopy(e),
        "direct-%d" % _direct_seq[0], md["bfcl"]["category"]))


class MultiTurnTest(support.Case):
    def setUp(self):
        support.require_samples(self)

    def test_wrong_calls_fail_as_bfcl_says(self):
        md = support.record("multi_turn_base", "multi_turn_base_0")
        turns = [gt_calls(md, t) for t in range(len(md["bfcl"]["answer"]["ground_truth"]))]
        cases = []
        # A directory of another name: the file system's state differs.
        state = copy.deepcopy(turns)
        state[0] = [(n, dict(a, dir_name="tmp") if n == "mkdir" else a) for n, a in state[0]]
        state[0] = [(n, dict(a, destination="tmp") if n == "mv" else a) for n, a in state[0]]
        cases.append(("state", state, "multi_turn:instance_state_mismatch"))
        # The right state, but grep never run: its result is missing.
        response = copy.deepcopy(turns)
        response[1] = [(n, a) for n, a in response[1] if n != "grep"]
        cases.append(("response", response, "multi_turn:execution_response_mismatch"))
        # Nothing done in a turn that wants calls.
        empty = copy.deepcopy(turns)
        empty[2] = []
        cases.append(("empty", empty, "multi_turn:empty_turn_model_response"))
        for what, calls, want in cases:
            with self.subTest(what):
                r = support.run_trial(self.harness, md, support.ScriptedWorker(script_from(calls)))
                direct = direct_check(md, calls)
                self.assertEqual(direct["error_type"], want, direct)
                self.assertFalse(r.verdict["pass"])
                self.assertEqual(r.details, direct)
                self.assertIn({"text": "bfcl: " + want}, r.kinds("log"))
                support.assert_events_valid(self, r.events)
        # And the ground truth through the scripted model passes, as directly.
        r = support.run_trial(self.harness, md, support.ScriptedWorker(script_from(turns)))
        self.assertTrue(r.verdict["pass"], r.verdict["details"])
        self.assertEqual(direct_check(md, turns), {"valid": True})
        self.assertEqual(len(r.kinds("model_call")), sum(2 if t else 1 for t in turns))

    def test_conversation_shape(self):
        md = support.record("multi_turn_base", "multi_turn_base_0")
        turns = [gt_calls(md, t) for t in range(len(md["bfcl"]["answer"]["ground_truth"]))]
        w = support.ScriptedWorker(script_from(turns))
        r = support.run_trial(self.harness, md, w)
        self.assertTrue(r.verdict["pass"])
        # The second query of turn 0 carries the calls and their results,
        # as tool messages answering each call id.
        second = w.calls[1]["messages"]
        self.assertEqual([m["role"] for m in second], ["user", "assistant"] + ["tool"] * len(turns[0]))
        self.assertEqual([m["tool_call_id"] for m in second[2:]], ["c%d" % i for i in range(len(turns[0]))])
        self.assertEqual(second[2]["content"], '{"current_working_directory": "document"}')
        results = r.kinds("tool_result")
        self.assertEqual(len(results), sum(len(t) for t in turns))
        # Each result follows its call, as the built-in agent records them.
        for i, ev in enumerate(r.events):
            if ev["kind"] == "tool_result":
                self.assertEqual(r.events[i - 1]["kind"], "tool_call")
                self.assertEqual(r.events[i - 1]["tool_call"]["id"], ev["tool_result"]["call_id"])
        steps = [e["step"] for e in r.events if e["kind"] == "model_call"]
        self.assertEqual(steps, list(range(1, len(steps) + 1)))

    def test_calls_are_checked_before_bfcl_runs_them(self):
        md = support.record("multi_turn_base", "multi_turn_base_0")
        with tempfile.TemporaryDirectory() as d:
            marker = os.path.join(d, "marker")
            code = "__import__('os').system('touch %s')" % marker
            hostile = support.calls_message(
                ("get_stock_info", {"symbol": "AAPL"}),  # a TradingBot method; not this entry's
                ("exec", {"source": code}),
                ("cd", {"x=%s,y" % code: 1}),
                ("cd(folder='a');import os", {}),
                ("cd", {"class": "document"}),
                ("cd", '{"folder": NaN}'),
                ("cd", '{"folder": 1e999}'),
                ("mkdir", {"dir_name": "'); %s; ('" % code}),
                ("touch", {"file_name": "note.txt"}),
                ("echo", {"content": code, "file_name": "note.txt"}),
                ("cat", {"file_name": "note.txt"}),
            )
            w = support.ScriptedWorker([hostile])
            r = support.run_trial(self.harness, md, w)
            self.assertFalse(os.path.exists(marker), "a call ran code")
        results = r.kinds("tool_result")
        self.assertEqual(len(results), 11)
        for res in results[:7]:
            self.assertTrue(res.get("is_error"), res)
            self.assertTrue(res["output"].startswith("Error during execution: not run: "), res)
        self.assertIn("is not one of the functions offered now", results[0]["output"])
        self.assertIn("is not a Python identifier", results[2]["output"])
        self.assertIn("is not one of the functions offered now", results[3]["output"])
        self.assertIn("is not a Python identifier", results[4]["output"])
        self.assertIn("not strict JSON", results[5]["output"])
        self.assertIn("out of range", results[6]["output"])
        # The code in values is only data: a directory name (BFCL's mkdir
        # rejects it, quoting it) and a file's content.
        self.assertIn(code, results[7]["output"])
        self.assertIn("Invalid character", results[7]["output"])
        self.assertEqual([x["output"] for x in results[8:10]], ["None", "None"])
        self.assertEqual(json.loads(results[10]["output"]), {"file_content": code})
        self.assertFalse(r.verdict["pass"])
        # The model was told, in the next query, for each call.
        self.assertEqual([m["role"] for m in w.calls[1]["messages"]][-11:], ["tool"] * 11)

    def test_values_too_deep_or_too_big_are_refused(self):
        # The worker hands arguments Python's json.loads cannot decode (over
        # 100 levels, or a number over 4000 digits) as their raw text; a
        # deep value that did decode is refused before BFCL builds a call
        # string or a pickle from it. The model is told; nothing crashes.
        md = support.record("multi_turn_base", "multi_turn_base_0")
        deep = {"folder": [[]]}
        inner = deep["folder"][0]
        for _ in range(150):
            inner.append([])
            inner = inner[0]
        # Undecodable text: BFCL's decoder fails, which ends the turn.
        undecodable = support.calls_message(
            ("cd", '{"folder": %s%s}' % ("[" * 985, "]" * 985)),
            ("cd", '{"folder": %s}' % ("9" * 5000)),
        )
        r = support.run_trial(self.harness, md, support.ScriptedWorker([undecodable]))
        results = r.kinds("tool_result")
        self.assertEqual(len(results), 2)
        self.assertTrue(all(res.get("is_error") for res in results), results)
        self.assertFalse(r.verdict["pass"])
        self.assertEqual(r.details["error_type"], "multi_turn:empty_turn_model_response", r.details)
        # A deep value that decoded is refused, and the model told why.
        r = support.run_trial(self.harness, md, support.ScriptedWorker([support.calls_message(("cd", deep))]))
        results = r.kinds("tool_result")
        self.assertTrue(results[0].get("is_error"), results[0])
        self.assertIn("nests deeper than 100 levels", results[0]["output"])
        self.assertFalse(r.verdict["pass"])
        self.assertNotEqual(r.details.get("error_type"), "evalsi:check_limit_exceeded", r.details)
        # The next trial on the same harness passes.
        self.assertTrue(support.run_trial(self.harness, md, oracle=True).verdict["pass"])

    def test_undecodable_step_ends_the_turn(self):
        md = support.record("multi_turn_base", "multi_turn_base_0")
        # Arguments that are not a JSON object: BFCL's decoder fails, which
        # ends the turn; the calls are answered with errors, none runs.
        for bad_args in ("{folder: document", '["document"]'):
            with self.subTest(bad_args):
                bad = support.calls_message(("cd", bad_args), ("mkdir", {"dir_name": "temp"}))
                w = support.ScriptedWorker([bad])
                r = support.run_trial(self.harness, md, w)
                first = [e for e in r.events if e.get("step") == 1 and e["kind"] == "tool_result"]
                self.assertEqual(len(first), 2)
                self.assertTrue(all(x["tool_result"]["is_error"] for x in first))
                # The next query is the next turn's.
                self.assertEqual(w.calls[1]["messages"][-1], md["bfcl"]["entry"]["question"][1][0])
                self.assertEqual(r.details["error_type"], "multi_turn:empty_turn_model_response")

    def test_step_limit(self):
        md = support.record("multi_turn_base", "multi_turn_base_0")
        w = support.ScriptedWorker([support.calls_message(("pwd", {}))] * 40)
        r = support.run_trial(self.harness, md, w)
        # BFCL's loop: a step over MAXIMUM_STEP_LIMIT ends the entry.
        self.assertEqual(len(w.calls), MAXIMUM_STEP_LIMIT + 1)
        self.assertEqual(r.details["error_type"], "multi_turn:force_terminated")
        self.assertEqual(r.result["stop_reason"], "max_steps")
        self.assertIn({"text": "bfcl: turn 0: forced to quit after %d steps" % MAXIMUM_STEP_LIMIT}, r.kinds("log"))

    def test_held_out_functions(self):
        md = support.record("multi_turn_miss_func", "multi_turn_miss_func_0")
        self.assertEqual(md["bfcl"]["entry"]["missed_function"], {"3": ["sort"]})
        w = support.ScriptedWorker()
        r = support.run_trial(self.harness, md, w)
        self.assertEqual(len(w.calls), 5)  # one text answer per turn
        for turn, call in enumerate(w.calls):
            names = {t["name"] for t in call["tools"]}
            self.assertIn("cd", names)
            self.assertEqual("sort" in names, turn >= 3, turn)
            if turn == 3:
                self.assertEqual(call["messages"][-1], {"role": "user",
                                                         "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC})
        self.assertIn({"text": "bfcl: turn 3 adds functions: sort"}, r.kinds("log"))
        # Only the docs offered from the start carry BFCL's language hint.
        sort = next(t for t in w.calls[3]["tools"] if t["name"] == "sort")
        cd = next(t for t in w.calls[3]["tools"] if t["name"] == "cd")
        self.assertTrue(cd["description"].endswith("Note that the provided function is in Python 3 syntax."))
        self.assertFalse(sort["description"].endswith("Python 3 syntax."))

        # Calling sort before it is offered is refused, not run.
        script = [support.calls_message(("sort", {"file_name": "final_report.pdf"}))]
        r = support.run_trial(self.harness, md, support.ScriptedWorker(script))
        first = r.kinds("tool_result")[0]
        self.assertTrue(first["is_error"])
        self.assertIn("'sort' is not one of the functions offered now", first["output"])

    def test_concurrent_trials(self):
        mds = [md for cat in ("multi_turn_base", "multi_turn_long_context", "multi_turn_miss_param")
               for md in support.records(cat)]
        with ThreadPoolExecutor(8) as pool:
            runs = list(pool.map(lambda md: support.run_trial(self.harness, md, oracle=True), mds))
        self.assertEqual([r.verdict["pass"] for r in runs], [True] * len(mds))
        self.assertEqual(support.parent_instances(), [])


def with_math(md):
    """The entry with MathAPI among its classes, for calls that burn CPU or
    memory; the ground truth is unchanged."""
    md = copy.deepcopy(md)
    md["bfcl"]["entry"]["involved_classes"].append("MathAPI")
    return md


class LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.harness = BFCLHarness(limits=sandbox.Limits(call_seconds=5, call_cpu_seconds=2, check_seconds=30,
                                                        check_cpu_seconds=30, memory_mb=512))

    def setUp(self):
        support.require_samples(self)

    def test_bombs_are_stopped_and_the_next_trial_passes(self):
        md = support.record("multi_turn_base", "multi_turn_base_0")
        cases = [
            ("cpu", ("power", {"base": 10, "exponent": 1000000000}), "cpu limit"),
            ("memory", ("square_root", {"number": 2, "precision": 1000000000}), "memory limit"),
        ]
        for what, call, want in cases:
            with self.subTest(what):
                w = support.ScriptedWorker([support.calls_message(call, ("ls", {}))])
                r = support.run_trial(self.harness, with_math(md), w)
                self.assertFalse(r.verdict["pass"])
                self.assertEqual(r.details["error_type"], harness.CALL_LIMIT)
                self.assertIn(want, r.details["error"])
                self.assertEqual(r.result["stop_reason"], "limit")
                stopped, later = r.kinds("tool_result")
                self.assertTrue(stopped["is_error"])
                self.assertIn("stopped: the call went over the " + want, stopped["output"])
                self.assertIn("not run", later["output"])
                self.assertEqual(len(w.calls), 1)
                # The adapter goes on: the next trial is unaffected.
                ok = support.run_trial(self.harness, with_math(md), oracle=True)
                self.assertTrue(ok.verdict["pass"], ok.verdict["details"])

    def test_wall_clock(self):
        md = support.record("multi_turn_base", "multi_turn_base_0")
        h = BFCLHarness(limits=sandbox.Limits(call_seconds=0.5, call_cpu_seconds=60, memory_mb=512))
        w = support.ScriptedWorker([support.calls_message(("power", {"base": 10, "exponent": 1000000000}))])
        r = support.run_trial(h, with_math(md), w)
        self.assertEqual(r.details["error_type"], harness.CALL_LIMIT)
        self.assertIn("wall-clock limit", r.details["error"])


if __name__ == "__main__":
    unittest.main()
