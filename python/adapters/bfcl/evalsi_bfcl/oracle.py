"""The oracle agent: an entry's ground truth, answered as a model would
answer it (assistant messages with tool calls), so it takes the same decode,
execute and grade path as a model's answer. An entry the oracle cannot
express raises OracleError (an infra error), never a made-up pass."""

import ast
import inspect
import json

from bfcl_eval.constants.enums import Language
from bfcl_eval.eval_checker.ast_eval.ast_checker import simple_function_checker

from evalsi_bfcl.entry import GRADING_MODEL, offered_name

IRRELEVANT_ANSWER = "None of the functions I have can do this."
TURN_DONE = "Done."


class OracleError(Exception):
    """The ground truth cannot be put as a model's answer."""


def _call(step, i, name, args):
    return {"id": "oracle_%d_%d" % (step, i), "name": name, "arguments": args}


def single_turn(entry, step=1):
    """The assistant message that answers a single-turn entry with its ground
    truth: the first possible answer (per parameter its first value, "" for
    an omitted one); no call for irrelevance; a call of the first offered
    function for live_relevance, whose arguments BFCL does not check."""
    cat = entry.category
    if cat in ("irrelevance", "live_irrelevance"):
        return {"role": "assistant", "content": IRRELEVANT_ANSWER}
    if cat == "live_relevance":
        if not entry.tools:
            raise OracleError("entry %s: live_relevance wants a call, and the entry offers no function" % entry.id)
        return {"role": "assistant", "content": "", "tool_calls": [_call(step, 0, entry.tools[0]["name"], {})]}
    docs = {f["name"]: f for f in entry.prompt_functions}
    calls = []
    for i, gt in enumerate(entry.answer):
        (fname, params), = gt.items()
        doc = docs.get(fname)
        if doc is None:
            raise OracleError("entry %s: the ground truth calls %r, which the entry does not offer" % (entry.id, fname))
        args = {}
        required = doc["parameters"].get("required") or []
        for p, values in params.items():
            where = "entry %s: %s's parameter %r" % (entry.id, fname, p)
            if not isinstance(values, list) or not values:
                raise OracleError("%s: its possible values are not a non-empty list (%.100r), so BFCL's checker "
                                  "accepts no answer" % (where, values))
            props = doc["parameters"]["properties"].get(p)
            first = values[0]
            if _omitted(first) or (props is None and "" in values):
                if p not in required:
                    continue
                # A required parameter cannot be left out, whatever the
                # answer's first value says: take its first real value (or
                # "", which string_checker accepts for [""]).
                first = next((v for v in values if not _omitted(v)), "")
            if props is None:
                raise OracleError("%s is not in the function's parameters, so BFCL's checker accepts no answer" % where)
            v = _first_choice(first, props, entry.language, where)
            if entry.language != Language.PYTHON:
                v = _encode(entry, fname, doc, p, values, v)
            args[p] = v
        calls.append(_call(step, i, offered_name(fname), args))
    return {"role": "assistant", "content": "", "tool_calls": calls}


def _omitted(v):
    return isinstance(v, str) and v == ""


def _first_choice(v, props, language, where):
    """A possible answer's first value as a model would send it. A dict
    parameter's possible value is itself {key: [values]} (dict_checker), a
    list of dicts holds such dicts (list_dict_checker): take the first value
    of each key, leaving out a key whose first value is ""."""
    t = props.get("type")
    dict_types = {Language.PYTHON: ("dict",), Language.JAVA: ("HashMap",), Language.JAVASCRIPT: ("dict",)}[language]
    if isinstance(v, dict) and t in dict_types:
        return _first_of_dict(v, where)
    items = props.get("items") or {}
    if isinstance(v, list) and items.get("type") == "dict" and all(isinstance(x, dict) for x in v):
        return [_first_of_dict(x, where) for x in v]
    return v


def _first_of_dict(d, where):
    out = {}
    for k, values in d.items():
        if not isinstance(values, list) or not values:
            raise OracleError("%s: the possible values of its key %r are not a non-empty list (%.100r), so BFCL's "
                              "dict checker accepts no answer" % (where, k, values))
        if not _omitted(values[0]):
            out[k] = values[0]
    return out


# Java and JavaScript answers are strings that BFCL's type converters turn
# into values (java_type_converter, js_type_converter). The oracle writes the
# value in the forms those converters read and keeps the first one BFCL's own
# simple_function_checker accepts for that parameter alone.

def _encode(entry, fname, doc, p, values, v):
    props = doc["parameters"]["properties"][p]
    desc = {"name": fname, "parameters": {"type": "dict", "properties": {p: props}, "required": []}}
    answer = {fname: {p: values}}
    gen = _java_forms if entry.language == Language.JAVA else _js_forms
    tried = []
    for form in gen(v, props.get("type"), (props.get("items") or {}).get("type")):
        if form in tried:
            continue
        tried.append(form)
        try:
            r = simple_function_checker(desc, {offered_name(fname): {p: form}}, answer, entry.language, GRADING_MODEL)
        except Exception:  # noqa: BLE001 - BFCL's converters raise on forms they do not read
            continue
        if r["valid"]:
            return form
    raise OracleError("entry %s: no %s form of %s's %r value %r (type %s) passes BFCL's checker (tried %s)"
                      % (entry.id, entry.language.value, fname, p, v, props.get("type"), tried[:6]))


def _num(v):
    return repr(v) if isinstance(v, float) else str(v)


def _java_scalar_forms(v, t):
    if isinstance(v, bool):
        return ["true" if v else "false"]
    if isinstance(v, int):
        return [str(v), "%dL" % v, "%df" % v, "%d.0" % v]
    if isinstance(v, float):
        return [repr(v), repr(v) + "f", "%gf" % v, "%g" % v]
    if isinstance(v, str):
        return [v, '"%s"' % v, "'%s'" % v]
    return []


def _java_forms(v, t, nested):
    if isinstance(v, str):
        yield v
    if isinstance(v, list):
        elems = [_java_scalar_forms(x, nested) for x in v]
        if any(not f for f in elems):
            return
        quoted = ['"%s"' % x if isinstance(x, str) else f[0] for x, f in zip(v, elems)]
        plain = [f[0] for f in elems]
        jt = {"String": "String", "integer": "int", "long": "long", "float": "float", "double": "double",
              "boolean": "boolean", "char": "char"}.get(nested, "Object")
        for parts in (quoted, plain, [f[1] if len(f) > 1 else f[0] for f in elems]):
            if not v:
                yield "new ArrayList<>()"
            yield "new ArrayList<>(Arrays.asList(%s))" % ", ".join(parts)
            yield "new %s[]{%s}" % (jt, ", ".join(parts))
            yield "new ArrayList<>() {{ %s }}" % " ".join("add(%s);" % x for x in parts)
        return
    if isinstance(v, dict):
        puts = []
        for k, x in v.items():
            f = _java_scalar_forms(x, None)
            if not f:
                return
            puts.append('put("%s", %s);' % (k, '"%s"' % x if isinstance(x, str) else f[0]))
        yield "new HashMap<String, Object>() {{ %s }}" % " ".join(puts) if puts else "new HashMap<>()"
        return
    yield from _java_scalar_forms(v, t)


def _js_scalar_forms(v):
    if isinstance(v, bool):
        return ["true" if v else "false"]
    if isinstance(v, int):
        return [str(v), "%dn" % v, "%d.0" % v]
    if isinstance(v, float):
        return [repr(v), ("%f" % v).rstrip("0").rstrip(".") or "0", ("%.1f" % v)]
    if isinstance(v, str):
        return [v, '"%s"' % v, "'%s'" % v]
    if isinstance(v, list):
        inner = [_js_scalar_forms(x) for x in v]
        if any(not f for f in inner):
            return []
        return ["[%s]" % ", ".join('"%s"' % x if isinstance(x, str) else f[0] for x, f in zip(v, inner))]
    return []


def _js_forms(v, t, nested):
    if isinstance(v, str):
        yield v
    if isinstance(v, list):
        elems = [_js_scalar_forms(x) for x in v]
        if any(not f for f in elems):
            return
        yield "[%s]" % ", ".join('"%s"' % x if isinstance(x, str) else f[0] for x, f in zip(v, elems))
        yield "[%s]" % ", ".join(f[0] for f in elems)
        yield "[%s]" % ", ".join("'%s'" % x if isinstance(x, str) else f[0] for x, f in zip(v, elems))
        return
    if isinstance(v, dict):
        for quote_keys in (False, True):
            for quote_vals in (True, False):
                pairs = []
                for k, x in v.items():
                    f = _js_scalar_forms(x)
                    if not f:
                        return
                    val = ('"%s"' % x) if isinstance(x, str) and quote_vals else f[0]
                    pairs.append("%s: %s" % ('"%s"' % k if quote_keys else k, val))
                yield "{%s}" % ", ".join(pairs)
        return
    yield from _js_scalar_forms(v)


def multi_turn_calls(entry, turn_index, step, offered):
    """The assistant message that makes all of a turn's ground-truth calls,
    or None for a turn whose ground truth is empty. Each call string is
    parsed with ast (never eval'd): keyword and positional arguments, the
    positional ones named by the BFCL class method's signature, values by
    ast.literal_eval. offered: the tool names offered in this turn; a
    ground-truth call of another function cannot be made."""
    calls = []
    for i, src in enumerate(entry.answer[turn_index]):
        name, args = _parse_gt_call(entry, src)
        if offered_name(name) not in offered:
            later = [t for t, docs in sorted(entry.holdouts.items()) if any(d["name"] == name for d in docs)]
            raise OracleError("entry %s: turn %d's ground-truth call %r names %s, which is not offered in that turn%s"
                              % (entry.id, turn_index, src, name,
                                 " (held out until turn %d)" % later[0] if later else ""))
        calls.append(_call(step, i, offered_name(name), args))
    if not calls:
        return None
    return {"role": "assistant", "content": "", "tool_calls": calls}


def turn_done():
    return {"role": "assistant", "content": TURN_DONE}


def _parse_gt_call(entry, src):
    where = "entry %s: ground-truth call %r" % (entry.id, src)
    try:
        node = ast.parse(src, mode="eval").body
    except SyntaxError as e:
        raise OracleError("%s is not a Python call: %s" % (where, e)) from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise OracleError("%s is not a call of a plain function name" % where)
    name = node.func.id
    cls = entry.methods.get(name)
    if cls is None:
        raise OracleError("%s: %s is not a method of the entry's classes" % (where, name))
    params = [p for p in inspect.signature(getattr(cls, name)).parameters.values()][1:]  # without self
    args = {}
    for i, a in enumerate(node.args):
        if isinstance(a, ast.Starred) or i >= len(params) or params[i].kind not in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY):
            raise OracleError("%s: positional argument %d has no parameter name in %s.%s"
                              % (where, i, cls.__name__, name))
        args[params[i].name] = _literal(a, where)
    for k in node.keywords:
        if k.arg is None:
            raise OracleError("%s uses **kwargs" % where)
        args[k.arg] = _literal(k.value, where)
    return name, args


def _literal(node, where):
    try:
        v = ast.literal_eval(node)
    except ValueError as e:
        raise OracleError("%s: an argument is not a literal: %s" % (where, e)) from None
    v = _as_json(v, where)
    return v


def _as_json(v, where):
    """A literal as the JSON value a model would send: tuples become lists
    (as in BFCL's own json round trips); anything JSON has no form for
    (sets, bytes, complex, non-string keys, NaN) cannot be expressed."""
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, list):
        return [_as_json(x, where) for x in v]
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise OracleError("%s: a dict argument has non-string keys, which JSON cannot carry" % where)
        return {k: _as_json(x, where) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        try:
            json.dumps(v, allow_nan=False)
        except ValueError:
            raise OracleError("%s: argument %r has no JSON form" % (where, v)) from None
        return v
    raise OracleError("%s: argument %r (%s) has no JSON form" % (where, v, type(v).__name__))
