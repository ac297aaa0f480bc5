"""Serves a Python harness class over the harness protocol.

    python3 -m evalsi_harness --socket PATH --class module:Class
    python3 -m evalsi_harness --socket PATH --class path/to/file.py:Class

The worker starts this for harness.external.python and stops it with
SIGTERM when the run ends. See the package docstring for the class's
methods.
"""

import argparse
import importlib
import importlib.util
import json
import os
import signal
import sys
import threading
import traceback
from concurrent import futures

import grpc

from evalsi_harness import PROTOCOL_VERSION, Trial, Worker
from evalsi_harness import harness_pb2 as pb
from evalsi_harness import harness_pb2_grpc as pbgrpc


def load_class(spec):
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise SystemExit("evalsi_harness: --class %r: want module:Class or path/to/file.py:Class" % spec)
    if module.endswith(".py") or os.sep in module:
        path = os.path.abspath(module)
        sys.path.insert(0, os.path.dirname(path))
        mspec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        if mspec is None:
            raise SystemExit("evalsi_harness: cannot load %s" % path)
        mod = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(module)
    try:
        return getattr(mod, name)
    except AttributeError:
        raise SystemExit("evalsi_harness: %s has no class %s" % (module, name)) from None


def _fail(context, what, exc):
    traceback.print_exc(file=sys.stderr)
    context.abort(grpc.StatusCode.INTERNAL, "%s: %s: %s" % (what, type(exc).__name__, exc))


class Servicer:
    """Forwards the Harness service's calls to the user's harness object."""

    def __init__(self, harness):
        self.h = harness
        self.trials = {}
        self.lock = threading.Lock()

    def _trial(self, trial_id, context):
        with self.lock:
            t = self.trials.get(trial_id)
        if t is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "trial %r was not set up" % trial_id)
        return t

    def Describe(self, request, context):
        info = {}
        if hasattr(self.h, "describe"):
            try:
                info = self.h.describe() or {}
            except Exception as e:  # noqa: BLE001 - reported to the worker
                _fail(context, "describe", e)
        caps = info.get("capabilities")
        if caps is None:
            caps = ["check"] if hasattr(self.h, "check") else []
        return pb.DescribeResponse(name=info.get("name", type(self.h).__name__),
                                   version=str(info.get("version", "")),
                                   protocol_version=PROTOCOL_VERSION, capabilities=caps)

    def Setup(self, request, context):
        if not request.trial_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "setup: trial_id is empty")
        t = request.task
        task = {
            "record_id": t.record_id, "trial": t.trial, "instruction": t.instruction,
            "input": json.loads(t.input_json) if t.input_json else [],
            "workdir": t.workdir, "command_timeout_ms": t.command_timeout_ms, "model": t.model,
            "metadata": json.loads(t.metadata_json) if t.metadata_json else {},
            "oracle": t.oracle,
        }
        trial = Trial(request.trial_id, task, Worker(request.worker_address))
        with self.lock:
            if request.trial_id in self.trials:
                trial.worker.close()
                context.abort(grpc.StatusCode.ALREADY_EXISTS, "trial %r is already set up" % request.trial_id)
            self.trials[request.trial_id] = trial
        if hasattr(self.h, "setup"):
            try:
                self.h.setup(trial)
            except Exception as e:  # noqa: BLE001
                _fail(context, "setup", e)
        return pb.SetupResponse()

    def Run(self, request, context):
        trial = self._trial(request.trial_id, context)
        context.add_callback(trial.cancelled.set)
        gen = self.h.run(trial)
        if not hasattr(gen, "__next__"):
            context.abort(grpc.StatusCode.INTERNAL, "run: %s.run must be a generator (yield events, return the result)"
                          % type(self.h).__name__)
        result = None
        try:
            while True:
                try:
                    event = next(gen)
                except StopIteration as done:
                    result = done.value or {}
                    break
                yield pb.RunMessage(event_json=json.dumps(event).encode())
        except Exception as e:  # noqa: BLE001
            _fail(context, "run", e)
        yield pb.RunMessage(result=pb.RunResult(output=result.get("output", ""),
                                                stop_reason=result.get("stop_reason", "")))

    def Check(self, request, context):
        trial = self._trial(request.trial_id, context)
        if not hasattr(self.h, "check"):
            return pb.CheckResponse()
        try:
            v = self.h.check(trial)
        except Exception as e:  # noqa: BLE001
            _fail(context, "check", e)
        if v is None:
            return pb.CheckResponse()
        passed = bool(v.get("pass", False))
        # "pass" is a Python keyword: set the field by name.
        verdict = pb.Verdict(**{"pass": passed}, score=float(v.get("score", 1.0 if passed else 0.0)),
                             details=str(v.get("details", "")))
        return pb.CheckResponse(verdict=verdict)

    def Teardown(self, request, context):
        with self.lock:
            trial = self.trials.pop(request.trial_id, None)
        if trial is None:
            return pb.TeardownResponse()
        try:
            if hasattr(self.h, "teardown"):
                self.h.teardown(trial)
        except Exception as e:  # noqa: BLE001
            _fail(context, "teardown", e)
        finally:
            trial.worker.close()
        return pb.TeardownResponse()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m evalsi_harness", description=__doc__.splitlines()[0])
    ap.add_argument("--socket", default=os.environ.get("EVALSI_HARNESS_SOCKET"),
                    help="unix socket to serve on (default $EVALSI_HARNESS_SOCKET)")
    ap.add_argument("--class", dest="cls", required=True, help="module:Class or path/to/file.py:Class")
    args = ap.parse_args(argv)
    if not args.socket:
        ap.error("--socket (or $EVALSI_HARNESS_SOCKET) is required")
    harness = load_class(args.cls)()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    pbgrpc.add_HarnessServicer_to_server(Servicer(harness), server)
    if server.add_insecure_port("unix://" + os.path.abspath(args.socket)) == 0:
        raise SystemExit("evalsi_harness: cannot listen on %s" % args.socket)
    server.start()
    stopped = threading.Event()

    def on_signal(signum, frame):
        stopped.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stopped.wait()
    server.stop(grace=2).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
