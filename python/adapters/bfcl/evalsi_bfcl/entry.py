"""A trial's BFCL entry: the record metadata checked, and the functions
prepared as BFCL prepares them for an OpenAI-style function-calling model."""

import copy
import importlib
import inspect
import ast
import re

from bfcl_eval.constants.enums import Language, ModelStyle, ReturnFormat
from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
from bfcl_eval.model_handler.utils import convert_to_tool
from bfcl_eval.utils import (
    add_language_specific_hint_to_function_doc,
    extract_test_category_from_id,
    is_java,
    is_js,
    populate_test_cases_with_predefined_functions,
)

AST_CATEGORIES = (
    "simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
)
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
CATEGORIES = AST_CATEGORIES + RELEVANCE_CATEGORIES + MULTI_TURN_CATEGORIES

# The classes the four multi-turn categories use (memory and web search are
# BFCL's agentic categories, which this harness does not run).
MULTI_TURN_CLASSES = (
    "GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
    "VehicleControlAPI",
)

# The BFCL model whose checker settings we grade with: an OpenAI FC model,
# whose config maps the offered "a_b" names back to BFCL's "a.b"
# (underscore_to_dot), as BFCL does for the handlers that rename them.
GRADING_MODEL = "gpt-4o-2024-11-20-FC"


_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def safe_ground_truth(eid, gt, methods):
    """The ground-truth call strings rebuilt from checked parts: BFCL's
    checker evals them, and they come from the dataset, which a spec may
    supply. Each must be a call of a method of the entry's classes with
    literal arguments; it is written back with repr, in its own positional
    and keyword form, so what BFCL runs is the same call."""
    out = []
    for turn in gt:
        calls = []
        for src in turn:
            where = "entry %s: ground-truth call %.200r" % (eid, src)
            try:
                node = ast.parse(src, mode="eval").body
            except SyntaxError as e:
                raise EntryError("%s is not a Python call: %s" % (where, e)) from None
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.func.id not in methods:
                raise EntryError("%s is not a call of a method of the entry's classes" % where)
            parts = []
            try:
                for a in node.args:
                    parts.append(repr(ast.literal_eval(a)))
                for k in node.keywords:
                    if k.arg is None:
                        raise EntryError("%s uses **kwargs" % where)
                    parts.append("%s=%r" % (k.arg, ast.literal_eval(k.value)))
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as e:
                raise EntryError("%s: an argument is not a literal: %s" % (where, e)) from None
            calls.append("%s(%s)" % (node.func.id, ",".join(parts)))
        out.append(calls)
    return out


class EntryError(ValueError):
    """The record's metadata is not a BFCL entry this harness can run."""


def offered_name(name):
    """The tool name BFCL's convert_to_tool gives a function for OpenAI-style
    models, which do not allow "." in names."""
    return re.sub(r"\.", "_", name)


class Entry:
    """One BFCL entry, checked. Attributes:

    category, id, entry (the raw entry; never mutated), answer (the
    possible_answer's ground_truth, or None), language / return_format (for
    the AST checker), and for multi-turn: functions (the docs offered from
    the first turn, with BFCL's language hint) and holdouts ({turn index:
    [docs]} for miss_func, added at that turn as BFCL adds them).
    """

    def __init__(self, metadata):
        if not isinstance(metadata, dict):
            raise EntryError("the record's metadata is %s, not an object with a \"bfcl\" key (import the dataset "
                             "with bfcl://<category>)" % type(metadata).__name__)
        b = metadata.get("bfcl")
        if not isinstance(b, dict):
            raise EntryError("the record's metadata has no \"bfcl\" object (keys: %s); import the dataset with "
                             "bfcl://<category>" % (", ".join(sorted(metadata)) or "none"))
        cat = b.get("category")
        if cat not in CATEGORIES:
            raise EntryError("metadata.bfcl.category %r is not supported; supported: %s" % (cat, ", ".join(CATEGORIES)))
        if "category" in metadata and metadata["category"] != cat:
            raise EntryError("metadata.category %r differs from metadata.bfcl.category %r"
                             % (metadata["category"], cat))
        e = b.get("entry")
        if not isinstance(e, dict) or not isinstance(e.get("id"), str) or not e["id"]:
            raise EntryError("metadata.bfcl.entry is not a BFCL entry object with a string \"id\"")
        eid = e["id"]
        # BFCL pastes the id into the names of the instances it prefixes
        # onto every call it evals: only plain characters may be in it.
        if not _SAFE_ID.fullmatch(eid):
            raise EntryError("entry id %.200r has characters other than letters, digits, _ and -" % eid)
        # BFCL decides how to grade from the id, so it must say the category.
        if extract_test_category_from_id(eid) != cat:
            raise EntryError("entry %s: its id names category %r, but metadata.bfcl.category is %r"
                             % (eid, extract_test_category_from_id(eid), cat))
        q = e.get("question")
        if not isinstance(q, list) or not q or not all(isinstance(t, list) for t in q):
            raise EntryError("entry %s: \"question\" is not a non-empty list of turns (lists of messages)" % eid)
        for ti, turn in enumerate(q):
            for m in turn:
                if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                        or not isinstance(m.get("content"), str):
                    raise EntryError("entry %s: turn %d has a message that is not {role: system|user|assistant, "
                                     "content: string}: %.200r" % (eid, ti, m))
        self.category = cat
        self.id = eid
        self.entry = e
        self.multi_turn = cat in MULTI_TURN_CATEGORIES
        if is_java(cat):
            self.language, self.return_format = Language.JAVA, ReturnFormat.JAVA
        elif is_js(cat):
            self.language, self.return_format = Language.JAVASCRIPT, ReturnFormat.JAVASCRIPT
        else:
            self.language, self.return_format = Language.PYTHON, ReturnFormat.PYTHON

        self.answer = None
        if cat not in RELEVANCE_CATEGORIES:
            a = b.get("answer")
            if not isinstance(a, dict) or not isinstance(a.get("ground_truth"), list):
                raise EntryError("entry %s: metadata.bfcl.answer is missing or has no \"ground_truth\" list "
                                 "(category %s is graded against its possible answer)" % (eid, cat))
            self.answer = a["ground_truth"]

        try:
            if self.multi_turn:
                self._init_multi_turn()
            else:
                self._init_single_turn()
        except EntryError:
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as ex:
            # BFCL's own preparation indexes the docs without checking them.
            raise EntryError("entry %s: BFCL cannot prepare its function docs (%s: %s); is it an entry of "
                             "BFCL_v4_%s.json?" % (eid, type(ex).__name__, ex, cat)) from ex

    def _init_single_turn(self):
        e = self.entry
        if len(e["question"]) != 1:
            raise EntryError("entry %s: a single-turn entry has %d turns" % (self.id, len(e["question"])))
        funcs = e.get("function")
        # An empty list is valid: some live_irrelevance entries offer none.
        if not isinstance(funcs, list) or not all(_is_func_doc(f) for f in funcs):
            raise EntryError("entry %s: \"function\" is not a list of function docs ({name, description, "
                             "parameters: {properties, ...}})" % self.id)
        if self.answer is not None:
            for gt in self.answer:
                if not isinstance(gt, dict) or len(gt) != 1 or not isinstance(list(gt.values())[0], dict):
                    raise EntryError("entry %s: a ground_truth item is not {function: {param: [values]}}: %.200r"
                                     % (self.id, gt))
        # What the checker sees: the functions without the language hint, as
        # eval_runner loads them (load_dataset_entry(...,
        # include_language_specific_hint=False)).
        self.prompt_functions = copy.deepcopy(funcs)
        # What the model sees: the hint added, then BFCL's conversion.
        hinted = add_language_specific_hint_to_function_doc([copy.deepcopy(e)])[0]["function"]
        self.tools = tools_for(hinted)
        self.offered = {t["name"]: f["name"] for t, f in zip(self.tools, funcs)}

    def _init_multi_turn(self):
        e = self.entry
        classes = e.get("involved_classes")
        if not isinstance(classes, list) or not classes or not all(c in MULTI_TURN_CLASSES for c in classes):
            raise EntryError("entry %s: \"involved_classes\" is not a non-empty list of BFCL's multi-turn classes "
                             "(%s): %.200r" % (self.id, ", ".join(MULTI_TURN_CLASSES), classes))
        if not isinstance(e.get("initial_config", {}), dict):
            raise EntryError("entry %s: \"initial_config\" is not an object" % self.id)
        gt = self.answer
        if len(gt) != len(e["question"]) or not all(isinstance(t, list) and all(isinstance(c, str) for c in t)
                                                    for t in gt):
            raise EntryError("entry %s: ground_truth is not one list of call strings per turn (%d turns)"
                             % (self.id, len(e["question"])))
        missed = e.get("missed_function", {})
        if not isinstance(missed, dict) or not all(isinstance(v, list) for v in missed.values()):
            raise EntryError("entry %s: \"missed_function\" is not {turn: [names]}" % self.id)
        for turn in missed:
            if not (turn.isdigit() and int(turn) < len(e["question"])):
                raise EntryError("entry %s: missed_function names turn %r; the entry has %d turns"
                                 % (self.id, turn, len(e["question"])))
            if e["question"][int(turn)]:
                raise EntryError("entry %s: turn %s adds held-out functions but has messages (BFCL requires it "
                                 "to be empty)" % (self.id, turn))
        # As BFCL's generation loads the entry: the classes' function docs
        # (held-out ones moved to missed_function), then the language hint,
        # which reaches only the docs offered from the start.
        p = copy.deepcopy(e)
        populate_test_cases_with_predefined_functions([p])
        add_language_specific_hint_to_function_doc([p])
        self.functions = p["function"]
        self.methods = method_classes(classes)
        self.answer = safe_ground_truth(self.id, self.answer, self.methods)
        self.holdouts = {int(k): v for k, v in p.get("missed_function", {}).items()}
        for turn, names in missed.items():
            if len(self.holdouts[int(turn)]) != len(names):
                raise EntryError("entry %s: missed_function for turn %s names functions the classes do not have: %s"
                                 % (self.id, turn, names))

    def checker_entry(self):
        """The entry as eval_runner hands it to the checker (a copy; the
        checker deletes keys from it)."""
        return copy.deepcopy(self.entry)


def method_classes(classes):
    """{public method name: class} for BFCL's classes, a later class winning
    a shared name as in execute_multi_turn_func_call's mapping."""
    out = {}
    for name in classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)
        for m, _ in inspect.getmembers(cls, inspect.isfunction):
            if not m.startswith("_"):
                out[m] = cls
    return out


def _is_func_doc(f):
    return (isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("parameters"), dict)
            and isinstance(f["parameters"].get("properties"), dict) and isinstance(f.get("description", ""), str))


def tools_for(functions):
    """BFCL's OpenAI Completions conversion of function docs, as tools for
    worker.chat: each converted item's "function", which the connector wraps
    again. Only name, description and parameters go over the protocol."""
    out = []
    for t in convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS):
        f = t["function"]
        out.append({"name": f["name"], "description": f.get("description", ""), "parameters": f["parameters"]})
    return out


def split_system(messages):
    """A turn's leading system messages (joined: they go to Chat's system)
    and the rest."""
    system = []
    i = 0
    while i < len(messages) and messages[i]["role"] == "system":
        system.append(messages[i]["content"])
        i += 1
    return "\n\n".join(system), [{"role": m["role"], "content": m["content"]} for m in messages[i:]]
