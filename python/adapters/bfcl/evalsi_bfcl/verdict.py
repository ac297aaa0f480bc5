"""BFCL's result for one entry, as the trial's verdict."""

import json

from bfcl_eval.utils import make_json_serializable

# Of a multi-turn failure's details, the parts that say what differed; the
# rest repeats the instances' whole state, which can be large.
_DETAIL_KEYS = ("differences", "missing_items")
_MAX_DETAILS = 16000


def _jsonable(v):
    # BFCL's own score-file conversion, and keys JSON can hold.
    v = make_json_serializable(v)
    if isinstance(v, dict):
        return {k if isinstance(k, str) else str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def summary(result):
    """{"valid": true}, or {"valid": false, "error_type", "error"[, "details"]}
    from an eval_runner entry result: the AST and relevance results carry
    error and error_type at the top, a multi-turn result the checker's dict
    (error_message, error_type, details) under "error"."""
    if result.get("valid"):
        return {"valid": True}
    out = {"valid": False}
    err = result.get("error")
    if isinstance(err, dict):
        out["error_type"] = err.get("error_type", result.get("error_type", ""))
        out["error"] = err.get("error_message", "")
        det = err.get("details")
        if isinstance(det, dict):
            kept = {k: det[k] for k in _DETAIL_KEYS if k in det}
            if kept:
                out["details"] = kept
    else:
        out["error_type"] = result.get("error_type", "")
        out["error"] = err
    return _jsonable(out)


def failure(error_type, error):
    """A failure of the agent that BFCL has no error type for (a call over a
    resource limit)."""
    return {"valid": False, "error_type": error_type, "error": error}


def verdict(s):
    """The harness protocol's verdict for a summary."""
    details = json.dumps(s)
    if len(details) > _MAX_DETAILS and "details" in s:
        s = {k: v for k, v in s.items() if k != "details"}
        details = json.dumps(dict(s, details_omitted="over %d bytes" % _MAX_DETAILS))
    if len(details) > _MAX_DETAILS:
        details = json.dumps({"valid": s["valid"], "error_type": s.get("error_type", ""),
                              "error": json.dumps(s.get("error"))[:_MAX_DETAILS // 2] + "..."})
    passed = bool(s["valid"])
    return {"pass": passed, "score": 1.0 if passed else 0.0, "details": details}
