"""Bad records are refused in setup with a clear message; the call checks
and the direct benchmark."""

import contextlib
import copy
import io
import json
import unittest

import support

from evalsi_bfcl import benchdirect, sandbox
from evalsi_bfcl.calls import Refused, checked_call, parse_arguments
from evalsi_bfcl.entry import Entry, EntryError


def _md(category, entry_id):
    return support.record(category, entry_id)


def _edit(md, f):
    md = copy.deepcopy(md)
    f(md)
    return md


class EntryTest(support.Case):
    def test_bad_metadata(self):
        support.require_samples(self)
        simple = _md("simple_python", "simple_python_0")
        multi = _md("multi_turn_miss_func", "multi_turn_miss_func_0")
        cases = [
            ("not an object", [], "not an object"),
            ("no bfcl key", {"benchmark": "bfcl"}, 'has no "bfcl" object (keys: benchmark)'),
            ("memory", _edit(simple, lambda m: m["bfcl"].update(category="memory_kv")), "'memory_kv' is not supported"),
            ("categories differ", _edit(simple, lambda m: m.update(category="multiple")), "differs"),
            ("id of another category",
             _edit(simple, lambda m: (m["bfcl"].update(category="simple_java"), m.pop("category"))),
             "its id names category 'simple_python'"),
            ("no answer", _edit(simple, lambda m: m["bfcl"].pop("answer")), "metadata.bfcl.answer is missing"),
            ("no question", _edit(simple, lambda m: m["bfcl"]["entry"].pop("question")), '"question" is not'),
            ("bad message", _edit(simple, lambda m: m["bfcl"]["entry"]["question"][0].append({"role": "robot"})),
             "turn 0 has a message"),
            ("bad function", _edit(simple, lambda m: m["bfcl"]["entry"].update(function=[{"name": 1}])),
             '"function" is not a list of function docs'),
            ("bad answer", _edit(simple, lambda m: m["bfcl"]["answer"].update(ground_truth=[["x"]])),
             "a ground_truth item is not"),
            ("unknown class", _edit(multi, lambda m: m["bfcl"]["entry"]["involved_classes"].append("WebSearchAPI")),
             "involved_classes"),
            ("turns differ", _edit(multi, lambda m: m["bfcl"]["answer"]["ground_truth"].pop()),
             "ground_truth is not one list of call strings per turn"),
            ("held-out turn with messages",
             _edit(multi, lambda m: m["bfcl"]["entry"]["question"][3].append({"role": "user", "content": "hi"})),
             "adds held-out functions but has messages"),
            ("held out unknown", _edit(multi, lambda m: m["bfcl"]["entry"]["missed_function"].update({"3": ["nope"]})),
             "names functions the classes do not have"),
            ("no type in a Java doc", _edit(_md("simple_java", "simple_java_0"), lambda m: [
                p.pop("type") for p in m["bfcl"]["entry"]["function"][0]["parameters"]["properties"].values()]),
             "BFCL cannot prepare its function docs"),
        ]
        for what, md, want in cases:
            with self.subTest(what):
                with self.assertRaises(EntryError) as cm:
                    Entry(md)
                self.assertIn(want, str(cm.exception))
                # Through the harness, setup raises it (an infra error).
                r = support.run_trial(self.harness, md, raise_errors=False)
                self.assertIsInstance(r.error, EntryError)
                self.assertEqual(r.events, [])

    def test_entry_is_not_changed(self):
        support.require_samples(self)
        for cat, eid in (("simple_java", "simple_java_1"), ("multi_turn_miss_func", "multi_turn_miss_func_0")):
            md = _md(cat, eid)
            before = json.dumps(md)
            support.run_trial(self.harness, md, oracle=True)
            self.assertEqual(json.dumps(md), before)


class CallsTest(unittest.TestCase):
    def test_arguments(self):
        ok = [
            ('{"a": 1, "b": [1.5, "x", null, true], "c": {"not an identifier": 1}}',
             {"a": 1, "b": [1.5, "x", None, True], "c": {"not an identifier": 1}}),
            ('{"a": 1, "a": 2}', {"a": 2}),  # as json takes duplicates
            ("{}", {}),
        ]
        for text, want in ok:
            self.assertEqual(parse_arguments(text), want)
        bad = [
            ('{"a": NaN}', "not strict JSON"),
            ('{"a": -Infinity}', "not strict JSON"),
            ('{"a": [1e400]}', "out of range"),
            ('"cd"', "not an object"),
            ('{"def": 1}', "not a Python identifier"),
            ('{"a b": 1}', "not a Python identifier"),
            ('{"a": 1', "not strict JSON"),
            ('{"a": %s}' % ("[" * 100000 + "]" * 100000), "not strict JSON"),
        ]
        for text, want in bad:
            with self.subTest(text=text[:40]):
                with self.assertRaises(Refused) as cm:
                    parse_arguments(text)
                self.assertIn(want, str(cm.exception))

    def test_call_string(self):
        offered = {"cd": "cd", "a_b": "a.b"}
        s, parsed = checked_call("cd", {"folder": "x'); import os; ('", "n": [1, {"k": None}]}, offered, {"cd"})
        # convert_to_function_call's form: repr of each value, a literal.
        self.assertEqual(s, "cd(folder=\"x'); import os; ('\",n=[1, {'k': None}])")
        self.assertEqual(parsed, {"cd": {"folder": "x'); import os; ('", "n": [1, {"k": None}]}})
        with self.assertRaises(Refused):
            checked_call("ls", {}, offered, {"cd", "ls"})  # not offered
        with self.assertRaises(Refused):
            checked_call("a_b", {}, offered, {"cd"})  # "a.b" is no method name


class LimitsTest(unittest.TestCase):
    def test_from_env(self):
        env = {"EVALSI_BFCL_CALL_SECONDS": "2.5", "EVALSI_BFCL_CHECK_SECONDS": "60", "EVALSI_BFCL_MEMORY_MB": "0"}
        lim = sandbox.Limits.from_env(env.get)
        self.assertEqual((lim.call_seconds, lim.call_cpu_seconds, lim.check_seconds, lim.memory_mb), (2.5, 2, 60.0, 0))
        d = sandbox.Limits.from_env({}.get)
        self.assertEqual((d.call_seconds, d.check_seconds, d.memory_mb), (10.0, 300.0, 2048))
        for name, value, want in (("EVALSI_BFCL_CALL_SECONDS", "soon", "is not a number"),
                                  ("EVALSI_BFCL_MEMORY_MB", "1.5", "is not an integer number"),
                                  ("EVALSI_BFCL_CHECK_SECONDS", "0", "want seconds above 0")):
            with self.assertRaises(ValueError) as cm:
                sandbox.Limits.from_env({name: value}.get)
            self.assertIn(want, str(cm.exception))


class BenchDirectTest(unittest.TestCase):
    def test_prints_a_rate(self):
        support.require_samples(self)
        for cat in ("simple_javascript", "live_irrelevance", "multi_turn_miss_func"):
            with self.subTest(cat):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    benchdirect.main(["--data-dir", str(support.SAMPLES), "--category", cat, "--n", "12"])
                r = json.loads(out.getvalue())
                self.assertEqual(set(r), {"entries", "seconds", "per_second"})
                self.assertEqual(r["entries"], 12)
                self.assertGreater(r["per_second"], 0)


if __name__ == "__main__":
    unittest.main()


class DatasetInjectionTest(unittest.TestCase):
    """BFCL's checker evals the ground truth, and prefixes calls with names
    made from the entry id: a dataset (which a spec may supply inline) that
    hides code in either is refused before anything runs."""

    def test_refused(self):
        import copy

        from evalsi_bfcl.entry import Entry, EntryError

        support.require_samples(self)
        md = support.record("multi_turn_base", "multi_turn_base_3")
        bad_gt = copy.deepcopy(md)
        bad_gt["bfcl"]["answer"]["ground_truth"][0] = ["find(path='.', name=__import__('os').system('touch /tmp/evalsi-gt-pwned'))"]
        bad_id = copy.deepcopy(md)
        bad_id["bfcl"]["entry"]["id"] = "multi_turn_base_3:__import__('os').system('id')"
        for name, m in (("ground truth", bad_gt), ("id", bad_id)):
            with self.subTest(name):
                with self.assertRaises(EntryError):
                    Entry(m)
        # The real ground truth is rebuilt to the same calls.
        self.assertEqual(Entry(md).answer[0], ["find(path='.',name='test')"])
