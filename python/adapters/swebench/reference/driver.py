"""Runs swebench's own log parsers and grading on cases Go sends, for the
differential tests in bench/swebench (*_differential_test.go).

One process per test: a JSON request on stdin, a JSON answer on stdout.

    {"op": "parse", "parsers": [names], "logs": [{"log", "instance_id", "version"}]}
        -> for each log, for each parser: {"status_map": {...}, "other_keys": [...]}
           | {"error": "ExcType: message"}
    {"op": "grade", "cases": [{"instance": {...}, "log", "model_patch"}]}
        -> [{"report": get_eval_report(...)[id], "status_map", "found"} | {"error"}]
    {"op": "registry"}
        -> {"version", "registry": [names], "aliases": {name: [names of the
            same function]}, "repo_parsers": {repo: [registry names]},
            "fail_only_repos": [...]}

A status map key that is not a str (prism's parser keys on whatever
fullTitle the JSON holds) is listed in other_keys, by repr, instead of being
turned into a JSON string: no FAIL_TO_PASS/PASS_TO_PASS id (a str) can equal
it, so it grades as absent.

Nothing here reimplements the package: it only calls it. The log for "grade"
goes through a file, as run_evaluation writes test_output.txt, because
get_logs_eval reads it with open() (universal newlines) and that is part of
what is being compared.
"""

import json
import os
import sys
import tempfile

import swebench
from swebench.harness import grading
from swebench.harness.constants import FAIL_ONLY_REPOS
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec


def _spec(instance_id="x__y-1", version="", repo="", f2p=(), p2p=(), log_parser="", eval_type="pass_and_fail"):
    return TestSpec(
        instance_id=instance_id,
        image="",
        eval_script_list=[],
        repo=repo,
        version=version,
        FAIL_TO_PASS=list(f2p),
        PASS_TO_PASS=list(p2p),
        log_parser=log_parser,
        eval_type=eval_type,
    )


def _error(e):
    return {"error": f"{type(e).__name__}: {e}"}


def parse(parsers, logs):
    out = []
    for c in logs:
        spec = _spec(instance_id=c.get("instance_id") or "x__y-1", version=c.get("version") or "")
        row = []
        for name in parsers:
            try:
                sm = PARSER_REGISTRY[name](c["log"], spec)
                row.append({
                    "status_map": {k: v for k, v in sm.items() if isinstance(k, str)},
                    "other_keys": [repr(k) for k in sm if not isinstance(k, str)],
                })
            except Exception as e:  # the harness lets these propagate: an error, not a grade
                row.append(_error(e))
        out.append(row)
    return out


def grade(cases):
    out = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "test_output.txt")
        for c in cases:
            inst = c["instance"]
            spec = _spec(
                instance_id=inst["instance_id"],
                version=inst.get("version", ""),
                repo=inst.get("repo", ""),
                f2p=inst["FAIL_TO_PASS"],
                p2p=inst["PASS_TO_PASS"],
                log_parser=inst["log_parser"],
                eval_type=inst["eval_type"],
            )
            # newline="" writes the bytes as given; reading them back is the
            # package's business.
            with open(path, "w", newline="") as f:
                f.write(c["log"])
            pred = {"instance_id": inst["instance_id"], "model_patch": c.get("model_patch", "diff")}
            try:
                report = grading.get_eval_report(spec, pred, path, include_tests_status=True)
                sm, found = grading.get_logs_eval(spec, path)
                out.append({
                    "report": report[inst["instance_id"]],
                    "status_map": {k: v for k, v in sm.items() if isinstance(k, str)},
                    "found": found,
                })
            except Exception as e:
                out.append(_error(e))
    return out


def registry():
    from swebench.harness.log_parsers import c, go, java, javascript, php, python, ruby, rust

    by_func = {}
    for name, fn in PARSER_REGISTRY.items():
        by_func.setdefault(id(fn), []).append(name)
    aliases = {name: sorted(by_func[id(fn)]) for name, fn in PARSER_REGISTRY.items()}
    repo_parsers = {}
    for mod in (c, go, java, javascript, php, python, ruby, rust):
        for attr in dir(mod):
            if attr.startswith("MAP_REPO_TO_PARSER_"):
                for repo, fn in getattr(mod, attr).items():
                    repo_parsers[repo] = sorted(by_func.get(id(fn), []))
    return {
        "version": swebench.__version__,
        "registry": sorted(PARSER_REGISTRY),
        "aliases": aliases,
        "repo_parsers": repo_parsers,
        "fail_only_repos": sorted(FAIL_ONLY_REPOS),
    }


def main():
    req = json.load(sys.stdin)
    # Some parsers print (warnings about a log); the answer must stay the
    # only thing on stdout.
    out, sys.stdout = sys.stdout, sys.stderr
    op = req["op"]
    if op == "parse":
        res = parse(req["parsers"], req["logs"])
    elif op == "grade":
        res = grade(req["cases"])
    elif op == "registry":
        res = registry()
    else:
        raise SystemExit(f"driver.py: unknown op {op!r} (want parse, grade or registry)")
    json.dump(res, out)


if __name__ == "__main__":
    main()
