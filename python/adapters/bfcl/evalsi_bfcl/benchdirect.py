"""Times BFCL's own checker called directly on a category's entries with
their oracle answers: no harness, no gRPC, no child processes. The Go bench
prints it next to the rate through the adapter.

    python -m evalsi_bfcl.benchdirect --data-dir DIR --category C [--n N]

prints one JSON line {"entries": n, "seconds": s, "per_second": r}. The
oracle answers are made before the clock starts; with --n above the number
of entries the entries repeat.
"""

import argparse
import json
import os
import sys
import time

from evalsi_bfcl.entry import CATEGORIES, RELEVANCE_CATEGORIES, Entry, EntryError, offered_name
from evalsi_bfcl.oracle import OracleError


def load(data_dir, category):
    """The category's records as the bfcl:// importer makes their metadata."""
    path = os.path.join(data_dir, "BFCL_v4_%s.json" % category)
    answers = {}
    if category not in RELEVANCE_CATEGORIES:
        apath = os.path.join(data_dir, "possible_answer", "BFCL_v4_%s.json" % category)
        with open(apath) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        a = json.loads(line)
                    except ValueError as e:
                        raise SystemExit("benchdirect: %s:%d: %s" % (apath, n, e)) from None
                    answers[a["id"]] = a
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError as ex:
                raise SystemExit("benchdirect: %s:%d: %s" % (path, n, ex)) from None
            b = {"category": category, "entry": e}
            if e.get("id") in answers:
                b["answer"] = answers[e["id"]]
            out.append({"benchmark": "bfcl", "category": category, "bfcl": b})
    return out


def _single(entry):
    from evalsi_bfcl import grading, oracle
    from evalsi_bfcl.calls import model_responses

    responses = model_responses(oracle.single_turn(entry))
    return lambda: grading.grade_single(entry, responses)


def _multi(entry):
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    from evalsi_bfcl import oracle
    from evalsi_bfcl.decode import FCDecoder
    from evalsi_bfcl.entry import GRADING_MODEL

    offered = {offered_name(f["name"]) for f in entry.functions}
    result = []
    for turn in range(len(entry.answer)):
        offered |= {offered_name(f["name"]) for f in entry.holdouts.get(turn, [])}
        msg = oracle.multi_turn_calls(entry, turn, 1, offered)
        steps = [[{c["name"]: c["arguments"]} for c in msg["tool_calls"]]] if msg else []
        result.append(steps + [[]])  # the text step that ends the turn

    def check():
        before = set(vars(multi_turn_utils))
        r = eval_runner._evaluate_single_multi_turn_entry(
            FCDecoder(), entry.id, result, entry.answer, entry.checker_entry(), GRADING_MODEL, entry.category)
        # BFCL keeps instances in the module's globals by entry id: drop
        # them, so a repeated entry starts from its initial state.
        for k in set(vars(multi_turn_utils)) - before:
            delattr(multi_turn_utils, k)
        return r

    return check


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m evalsi_bfcl.benchdirect", description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True,
                    help="the directory holding BFCL_v4_<category>.json and possible_answer/")
    ap.add_argument("--category", required=True, choices=CATEGORIES)
    ap.add_argument("--n", type=int, default=0, help="entries to check (default: all of the category's)")
    args = ap.parse_args(argv)
    records = load(args.data_dir, args.category)
    if not records:
        raise SystemExit("benchdirect: %s has no entries" % args.category)
    checks = []
    for md in records:
        try:
            e = Entry(md)
            checks.append(_multi(e) if e.multi_turn else _single(e))
        except (EntryError, OracleError) as ex:
            raise SystemExit("benchdirect: %s" % ex) from None
    n = args.n or len(checks)
    failed = 0
    start = time.perf_counter()
    for i in range(n):
        if not checks[i % len(checks)]()["valid"]:
            failed += 1
    seconds = time.perf_counter() - start
    if failed:
        # The oracle should pass everything it can express.
        print("benchdirect: %d of %d oracle answers failed BFCL's checker" % (failed, n), file=sys.stderr)
    print(json.dumps({"entries": n, "seconds": round(seconds, 6),
                      "per_second": round(n / seconds, 3) if seconds > 0 else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
