"""Single-turn grading: perturbed answers fail with the error type BFCL's
own checker reports for the same output, computed side by side."""

import copy
import json
import unittest

import support
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

from evalsi_bfcl import oracle
from evalsi_bfcl.entry import GRADING_MODEL, Entry


def _set(param, value, call=0):
    def f(calls):
        calls[call]["arguments"][param] = value
    return f


def _drop(param, call=0):
    def f(calls):
        del calls[call]["arguments"][param]
    return f


def _rename(name, call=0):
    def f(calls):
        calls[call]["name"] = name
    return f


def _dup(calls):
    calls.append(copy.deepcopy(calls[0]))


def _pop(calls):
    calls.pop()


def _swap(calls):
    calls.reverse()


def _raw_args(text):
    def f(calls):
        calls[0]["arguments"] = text
    return f


# (what, category, entry, change to the oracle's calls, expected error type;
# None: passes). The change applies to the tool calls the oracle would make.
CASES = [
    ("wrong type", "simple_python", "simple_python_0", _set("base", "10"), "type_error:simple"),
    ("bool for int", "simple_python", "simple_python_0", _set("base", True), "type_error:simple"),
    ("int for float is fine", "parallel", "parallel_4", _set("height", 6), None),
    ("extra parameter", "simple_python", "simple_python_0", _set("color", "red"),
     "simple_function_checker:unexpected_param"),
    ("missing required", "simple_python", "simple_python_0", _drop("height"),
     "simple_function_checker:missing_required"),
    ("missing optional", "live_simple", "live_simple_0-0-0", _drop("special"),
     "simple_function_checker:missing_optional"),
    ("optional left out", "simple_python", "simple_python_0", _drop("unit"), None),
    ("wrong value", "simple_python", "simple_python_0", _set("base", 11), "value_error:others"),
    ("wrong string", "simple_python", "simple_python_0", _set("unit", "inches"), "value_error:string"),
    ("string compared loosely", "simple_python", "simple_python_0", _set("unit", "U-N_I.T S"), None),
    ("reordered list", "multiple", "multiple_3", _set("pointA", [4, 3]), "value_error:list/tuple"),
    ("nested type", "multiple", "multiple_3", _set("pointA", ["3", "4"]), "type_error:nested"),
    ("wrong function name", "simple_python", "simple_python_0", _rename("calculate_circle_area"),
     "simple_function_checker:wrong_func_name"),
    ("dotted name not renamed", "simple_python", "simple_python_1", _rename("math.factorial"),
     "simple_function_checker:wrong_func_name"),
    ("wrong count", "simple_python", "simple_python_0", _dup, "simple_function_checker:wrong_count"),
    ("wrong count, multiple", "multiple", "multiple_2", _dup, "multiple_function_checker:wrong_count"),
    ("wrong count, parallel", "parallel", "parallel_0", _pop, "parallel_function_checker_no_order:wrong_count"),
    ("no match, parallel", "parallel", "parallel_0", _set("duration", 21, call=1),
     "parallel_function_checker_no_order:cannot_find_match"),
    ("any order, parallel", "parallel", "parallel_0", _swap, None),
    ("java: not a string", "simple_java", "simple_java_1", _set("useShortName", True), "type_error:java"),
    ("java: wrong boolean", "simple_java", "simple_java_1", _set("useShortName", "false"), "value_error:others"),
    ("java: dict key missing", "simple_java", "simple_java_1",
     _set("params", 'new HashMap<String, Object>() {{ put("limit", 50); }}'), "value_error:dict_key"),
    ("java: dict value wrong", "simple_java", "simple_java_1",
     _set("params", 'new HashMap<String, Object>() {{ put("limit", 5); put("schemaFilter", "public"); }}'),
     "value_error:dict_value"),
    ("js: not a string", "simple_javascript", "simple_javascript_0", _set("isComplete", True), "type_error:js"),
    # The converter leaves a string it cannot read as it is.
    ("js: unconvertible", "simple_javascript", "simple_javascript_3", _set("coordinates", "sixty, thirty"),
     "type_error:simple"),
    ("js: array reordered", "simple_javascript", "simple_javascript_3", _set("coordinates", "[30, 60]"),
     "value_error:list/tuple"),
    ("live: bool for int", "live_simple", "live_simple_0-0-0", _set("user_id", True), "type_error:simple"),
]

# Answers BFCL cannot decode into calls: no side-by-side AST check exists
# for them, only eval_runner's literal error types.
DECODE_CASES = [
    ("arguments not JSON", "simple_python", "simple_python_0", _raw_args("{base: 10"), "ast_decoder:decoder_failed"),
    ("arguments a list", "simple_python", "simple_python_0", _raw_args("[10, 5]"),
     "ast_decoder:decoder_wrong_output_format"),
    # What the worker hands over for arguments json.loads cannot decode.
    ("arguments too deep", "simple_python", "simple_python_0",
     _raw_args('{"base": %s%s}' % ("[" * 985, "]" * 985)), "ast_decoder:decoder_failed"),
    ("number too long", "simple_python", "simple_python_0",
     _raw_args('{"base": %s}' % ("9" * 5000)), "ast_decoder:decoder_failed"),
]


class SingleTurnTest(support.Case):
    def _answer(self, md, change):
        msg = oracle.single_turn(Entry(md))
        change(msg["tool_calls"])
        return msg

    def _direct(self, md, msg):
        """BFCL's ast_checker on the decoded output, called directly."""
        e = Entry(md)
        decoded = [{c["name"]: json.loads(json.dumps(c["arguments"]))} for c in msg["tool_calls"]]
        b = md["bfcl"]
        return ast_checker(copy.deepcopy(b["entry"]["function"]), decoded, b["answer"]["ground_truth"], e.language,
                           b["category"], GRADING_MODEL)

    def test_perturbations(self):
        support.require_samples(self)
        for what, cat, eid, change, want in CASES:
            with self.subTest(what):
                md = support.record(cat, eid)
                msg = self._answer(md, change)
                r = support.run_trial(self.harness, md, support.ScriptedWorker([msg]))
                direct = self._direct(md, msg)
                if want is None:
                    self.assertTrue(direct["valid"], direct)
                    self.assertTrue(r.verdict["pass"], r.verdict["details"])
                    continue
                self.assertFalse(direct["valid"])
                self.assertEqual(direct["error_type"], want, direct)
                self.assertFalse(r.verdict["pass"])
                self.assertEqual(r.verdict["score"], 0.0)
                self.assertEqual(r.details["error_type"], want, r.details)
                self.assertEqual(r.details["error"], direct["error"])
                self.assertIn({"text": "bfcl: " + want}, r.kinds("log"))

    def test_undecodable(self):
        support.require_samples(self)
        for what, cat, eid, change, want in DECODE_CASES:
            with self.subTest(what):
                md = support.record(cat, eid)
                r = support.run_trial(self.harness, md, support.ScriptedWorker([self._answer(md, change)]))
                self.assertEqual(r.details["error_type"], want, r.details)

    def test_text_answers(self):
        support.require_samples(self)
        cases = [
            # Text where calls are wanted: BFCL's FC decoder fails on it...
            ("simple_python", "simple_python_0", "The area is 25.", False, "ast_decoder:decoder_failed"),
            # ...but an empty text decodes to no calls.
            ("simple_python", "simple_python_0", "", False, "simple_function_checker:wrong_count"),
            ("irrelevance", "irrelevance_0", "I cannot do that with these tools.", True, None),
            ("live_irrelevance", "live_irrelevance_0-0-0", "", True, None),
            ("live_relevance", "live_relevance_0-0-0", "Here is a painting.", False, "relevance_error:decoder_failed"),
        ]
        for cat, eid, text, passes, want in cases:
            with self.subTest(entry=eid, text=text):
                r = support.run_trial(self.harness, support.record(cat, eid),
                                      support.ScriptedWorker([support.text_message(text)]))
                self.assertEqual(r.verdict["pass"], passes, r.verdict["details"])
                if want:
                    self.assertEqual(r.details["error_type"], want)
                self.assertEqual(r.result["output"], text or "[]")  # "" decodes to no calls

    def test_relevance_calls(self):
        support.require_samples(self)
        md = support.record("irrelevance", "irrelevance_0")
        call = support.calls_message(("determine_body_mass_index", {"weight": 70, "height": 1.8}))
        r = support.run_trial(self.harness, md, support.ScriptedWorker([call]))
        self.assertEqual(r.details["error_type"], "irrelevance_error:decoder_success")
        # live_relevance takes any call, its arguments unchecked.
        md = support.record("live_relevance", "live_relevance_0-0-0")
        name = Entry(md).tools[0]["name"]
        r = support.run_trial(self.harness, md, support.ScriptedWorker([support.calls_message((name, {"x": 1}))]))
        self.assertTrue(r.verdict["pass"], r.verdict["details"])

    def test_what_the_model_is_offered(self):
        support.require_samples(self)
        w = support.ScriptedWorker()
        support.run_trial(self.harness, support.record("simple_java", "simple_java_1"), w)
        (call,) = w.calls
        (tool,) = call["tools"]
        # "." becomes "_", the Java hint is added and the types are strings,
        # as BFCL converts them for OpenAI-style FC models.
        self.assertEqual(tool["name"], "SQLCompletionAnalyzer_makeProposalsFromObject")
        self.assertTrue(tool["description"].endswith(" Note that the provided function is in Java 8 SDK syntax."))
        self.assertEqual(tool["parameters"]["type"], "object")
        self.assertEqual({p["type"] for p in tool["parameters"]["properties"].values()}, {"string"})
        self.assertEqual(set(tool), {"name", "description", "parameters"})
        self.assertIsNone(call["temperature"])
        self.assertEqual([m["role"] for m in call["messages"]], ["user"])

        # A live entry's leading system message goes to system.
        md = next(m for m in support.records("live_multiple") + support.records("live_simple")
                  + support.records("live_irrelevance") if m["bfcl"]["entry"]["question"][0][0]["role"] == "system")
        w = support.ScriptedWorker()
        r = support.run_trial(self.harness, md, w)
        self.assertEqual(w.calls[0]["system"], md["bfcl"]["entry"]["question"][0][0]["content"])
        self.assertNotIn("system", [m["role"] for m in w.calls[0]["messages"]])
        self.assertEqual(r.kinds("message")[0]["role"], "system")

    def test_model_events(self):
        support.require_samples(self)
        md = support.record("parallel", "parallel_0")
        msg = oracle.single_turn(Entry(md))
        for c in msg["tool_calls"]:
            c["arguments"] = json.dumps(c["arguments"])  # arguments as a JSON string, as some connectors give them
            c["id"] = ""
        r = support.run_trial(self.harness, md, support.ScriptedWorker([msg]))
        self.assertTrue(r.verdict["pass"], r.verdict["details"])
        support.assert_events_valid(self, r.events)
        self.assertEqual(len(r.kinds("model_call")), 1)
        self.assertEqual([c["id"] for c in r.kinds("tool_call")], ["call_1_0", "call_1_1"])
        self.assertEqual(json.loads(r.result["output"]),
                         [{"spotify_play": {"artist": "Taylor Swift", "duration": 20}},
                          {"spotify_play": {"artist": "Maroon 5", "duration": 15}}])


if __name__ == "__main__":
    unittest.main()


class GradingLimitTest(unittest.TestCase):
    def test_quadratic_converter_input_is_stopped(self):
        # BFCL's Java HashMap converter is quadratic in its input: this
        # answer takes seconds (a 1 MB one, minutes) of the grader's CPU.
        # Grading runs in a child under grade_seconds, so the trial fails
        # with the limit's error type and the adapter goes on.
        support.require_samples(self)
        from evalsi_bfcl import BFCLHarness, sandbox

        h = BFCLHarness(limits=sandbox.Limits(grade_seconds=0.3))
        md = support.record("simple_java", "simple_java_1")
        msg = oracle.single_turn(Entry(md))
        msg["tool_calls"][0]["arguments"]["params"] = "new HashMap<" * 8000
        r = support.run_trial(h, md, support.ScriptedWorker([msg]))
        self.assertFalse(r.verdict["pass"])
        self.assertEqual(r.details["error_type"], "evalsi:check_limit_exceeded")
        # The same harness grades the next answer.
        r = support.run_trial(h, md, oracle=True)
        self.assertTrue(r.verdict["pass"])
