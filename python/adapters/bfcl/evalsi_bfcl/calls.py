"""The model's tool calls in BFCL's shapes, and the checks a multi-turn call
passes before BFCL executes it.

BFCL executes a multi-turn call by eval of a Python call string (see
multi_turn_utils.execute_multi_turn_func_call). We never eval text the
model wrote: the string is built from checked parts only — a function
offered at that step, keyword names that are Python identifiers, values
strictly parsed from JSON and written with repr (a Python literal) — exactly
as BFCL's convert_to_function_call writes it.
"""

import json
import keyword
import math

from bfcl_eval.model_handler.utils import convert_to_function_call

# What BFCL's multi-turn execution prefixes an exception's text with; a
# refused call reads the same to the model.
ERROR_PREFIX = "Error during execution: "


class Refused(Exception):
    """A call that is not run: the model's mistake, which it is told."""


def args_string(arguments):
    """A tool call's arguments as the JSON text an OpenAI response carries
    (the connector usually hands them over already parsed)."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments)


def model_responses(message):
    """BFCL's model_responses for an assistant message, as
    OpenAICompletionsHandler._parse_query_response_FC builds them: a list of
    {name: arguments JSON} when it has tool calls, else its text."""
    calls = message.get("tool_calls") or []
    if calls:
        return [{c.get("name", ""): args_string(c.get("arguments"))} for c in calls]
    return message.get("content") or ""


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


# Deeper arguments are refused: BFCL's call string and the pickle that takes
# it to the child would recurse past Python's limit.
MAX_DEPTH = 100


def _check_value(v, path, depth=1):
    if depth > MAX_DEPTH:
        raise Refused("argument %s nests deeper than %d levels" % (path.split("[", 1)[0], MAX_DEPTH))
    if isinstance(v, float) and not math.isfinite(v):
        # 1e999 parses to inf, whose repr is not a literal.
        raise Refused("argument %s is a number out of range" % path)
    if isinstance(v, list):
        for i, x in enumerate(v):
            _check_value(x, "%s[%d]" % (path, i), depth + 1)
    elif isinstance(v, dict):
        for k, x in v.items():
            _check_value(x, "%s[%r]" % (path, k), depth + 1)


def parse_arguments(text):
    """Strict JSON object arguments: no NaN or Infinity, finite numbers, and
    keyword names that are Python identifiers and not keywords."""
    try:
        args = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise Refused("the arguments are not strict JSON: %s" % e) from None
    if not isinstance(args, dict):
        raise Refused("the arguments are JSON %s, not an object of named arguments" % type(args).__name__)
    for k, v in args.items():
        if not k.isidentifier() or keyword.iskeyword(k):
            raise Refused("argument name %r is not a Python identifier" % k)
        _check_value(v, k)
    return args


def checked_call(name, arguments, offered, methods):
    """The call string BFCL would execute for one tool call, built from
    checked parts, and its (function, arguments) for the checker.

    offered: {offered tool name: function name} at this step; methods: the
    public method names of the entry's classes. Raises Refused.
    """
    real = offered.get(name)
    if real is None:
        raise Refused("function %r is not one of the functions offered now (%s)"
                      % (name, ", ".join(sorted(offered)) or "none"))
    if not real.isidentifier() or keyword.iskeyword(real) or real not in methods:
        raise Refused("function %r is not a method of this entry's classes" % real)
    args = parse_arguments(args_string(arguments))
    return convert_to_function_call([{real: args}])[0], {real: args}
