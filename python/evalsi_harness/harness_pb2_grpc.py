# Client stubs and service registration for harness.proto
# (evalsi.harness.v1), written by hand on grpc's generic API because Debian
# ships python3-grpcio without grpc_tools. Keep in step with the .proto:
# scripts/gen-proto.sh regenerates harness_pb2.py only.
import grpc

from evalsi_harness import harness_pb2 as pb

_HARNESS = "evalsi.harness.v1.Harness"
_WORKER = "evalsi.harness.v1.Worker"

# method name -> (request type, response type, server streaming)
HARNESS_METHODS = {
    "Describe": (pb.DescribeRequest, pb.DescribeResponse, False),
    "Setup": (pb.SetupRequest, pb.SetupResponse, False),
    "Run": (pb.RunRequest, pb.RunMessage, True),
    "Check": (pb.CheckRequest, pb.CheckResponse, False),
    "Teardown": (pb.TeardownRequest, pb.TeardownResponse, False),
}

WORKER_METHODS = {
    "Exec": (pb.ExecRequest, pb.ExecResponse, False),
    "ReadFile": (pb.ReadFileRequest, pb.ReadFileResponse, False),
    "WriteFile": (pb.WriteFileRequest, pb.WriteFileResponse, False),
    "Chat": (pb.ChatRequest, pb.ChatResponse, False),
}


def _stub(obj, channel, service, methods):
    for name, (req, resp, streaming) in methods.items():
        make = channel.unary_stream if streaming else channel.unary_unary
        setattr(obj, name, make("/%s/%s" % (service, name),
                                request_serializer=req.SerializeToString,
                                response_deserializer=resp.FromString))


def _add(servicer, server, service, methods):
    handlers = {}
    for name, (req, resp, streaming) in methods.items():
        make = grpc.unary_stream_rpc_method_handler if streaming else grpc.unary_unary_rpc_method_handler
        handlers[name] = make(getattr(servicer, name),
                              request_deserializer=req.FromString,
                              response_serializer=resp.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))


class HarnessStub:
    """Client of the Harness service (what the worker calls)."""

    def __init__(self, channel):
        _stub(self, channel, _HARNESS, HARNESS_METHODS)


class WorkerStub:
    """Client of the Worker service (what a harness calls back)."""

    def __init__(self, channel):
        _stub(self, channel, _WORKER, WORKER_METHODS)


def add_HarnessServicer_to_server(servicer, server):
    """Serves servicer's Describe, Setup, Run, Check and Teardown."""
    _add(servicer, server, _HARNESS, HARNESS_METHODS)


def add_WorkerServicer_to_server(servicer, server):
    """Serves servicer's Exec, ReadFile, WriteFile and Chat."""
    _add(servicer, server, _WORKER, WORKER_METHODS)
