"""The adapter served for real: the evalsi_harness shim started as the
worker starts it, called over gRPC on its unix socket."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import support
from evalsi_harness import harness_pb2 as pb
from evalsi_harness import harness_pb2_grpc as pbgrpc


class ShimTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bfcl-shim-")
        cls.socket = os.path.join(cls.dir, "h.sock")
        env = dict(os.environ, PYTHONPATH=str(support.REPO / "python"))
        cls.stderr = open(os.path.join(cls.dir, "stderr"), "w+")
        # From a directory of its own: the adapter must not write in it.
        cls.cwd = os.path.join(cls.dir, "cwd")
        os.mkdir(cls.cwd)
        cls.proc = subprocess.Popen([sys.executable, "-m", "evalsi_harness", "--socket", cls.socket,
                                     "--class", "evalsi_bfcl:BFCLHarness"], env=env, cwd=cls.cwd,
                                    stdout=cls.stderr, stderr=cls.stderr)
        deadline = time.monotonic() + 60
        while not os.path.exists(cls.socket):
            if cls.proc.poll() is not None or time.monotonic() > deadline:
                cls.stderr.seek(0)
                raise AssertionError("the shim did not start: %s" % cls.stderr.read())
            time.sleep(0.05)
        cls.channel = grpc.insecure_channel("unix://" + cls.socket)
        cls.stub = pbgrpc.HarnessStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.proc.terminate()
        cls.proc.wait(10)
        cls.stderr.close()

    def test_describe(self):
        d = self.stub.Describe(pb.DescribeRequest(protocol_version="1"), timeout=30)
        self.assertEqual(d.name, "bfcl")
        self.assertEqual(d.version, "2026.3.23")
        self.assertEqual(d.protocol_version, "1")
        self.assertEqual(list(d.capabilities), ["check", "no-sandbox"])

    def test_oracle_trials(self):
        support.require_samples(self)
        for md in (support.record("parallel_multiple", "parallel_multiple_0"),
                   support.record("multi_turn_miss_func", "multi_turn_miss_func_0")):
            tid = "shim-" + md["bfcl"]["entry"]["id"]
            with self.subTest(tid):
                task = pb.Task(record_id=md["bfcl"]["entry"]["id"], metadata_json=json.dumps(md).encode(),
                               oracle=True)
                # No worker serves this address: the oracle never calls it.
                self.stub.Setup(pb.SetupRequest(trial_id=tid, worker_address="unix:///nonexistent", task=task),
                                timeout=30)
                events, result = [], None
                for m in self.stub.Run(pb.RunRequest(trial_id=tid), timeout=60):
                    if m.WhichOneof("kind") == "event_json":
                        events.append(json.loads(m.event_json))
                    else:
                        result = m.result
                v = self.stub.Check(pb.CheckRequest(trial_id=tid), timeout=30).verdict
                self.stub.Teardown(pb.TeardownRequest(trial_id=tid), timeout=30)
                self.assertTrue(getattr(v, "pass"), v.details)
                self.assertEqual(v.score, 1.0)
                self.assertEqual(json.loads(v.details), {"valid": True})
                self.assertEqual(result.stop_reason, "answered")
                self.assertTrue([e for e in events if e["kind"] == "tool_call"])
        self.assertEqual(os.listdir(self.cwd), [])

    def test_bad_record_is_an_error(self):
        task = pb.Task(record_id="x", metadata_json=json.dumps({"bfcl": {"category": "memory_kv"}}).encode())
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Setup(pb.SetupRequest(trial_id="bad", worker_address="unix:///nonexistent", task=task),
                            timeout=30)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INTERNAL)
        self.assertIn("'memory_kv' is not supported", cm.exception.details())


if __name__ == "__main__":
    unittest.main()
