"""Runs Terminal-Bench's own test-output parsers (terminal-bench==0.2.18)
on outputs Go sends, for bench/terminalbench's differential tests.

    python3 terminalbench.py WHEEL < {"parser": "pytest"|"swebench", "outputs": [str]}
        -> [{"results": {name: "passed"|"failed"}} | {"error": "ExcType: message"}]

The package needs Python >= 3.12 as a whole, but its parser modules do not:
they are imported straight from the wheel (a zip on sys.path's import
machinery), with the packages above them made empty, so the harness the
package's __init__ pulls in is never imported. Nothing is copied or
rewritten: the code that runs is the wheel's.
"""

import json
import os
import sys
import types


def load(wheel):
    for name in ("terminal_bench", "terminal_bench.parsers", "terminal_bench.utils"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(wheel, *name.split("."))]
        sys.modules[name] = pkg
    from terminal_bench.parsers.pytest_parser import PytestParser
    from terminal_bench.parsers.swebench_parser import SWEBenchParser

    return {"pytest": PytestParser, "swebench": SWEBenchParser}


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: terminalbench.py TERMINAL_BENCH_WHEEL < request.json")
    parsers = load(sys.argv[1])
    req = json.load(sys.stdin)
    parser = parsers[req["parser"]]()
    out = []
    for content in req["outputs"]:
        try:
            res = parser.parse(content)
            out.append({"results": {k: v.value for k, v in res.items()}})
        except Exception as e:  # Terminal-Bench records these as PARSE_ERROR
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
