"""A real OTLP trace receiver for the tests: OTLP/HTTP (protobuf) and OTLP/gRPC, decoding with
the official `opentelemetry-proto` package. Prints `HTTP_PORT GRPC_PORT` on its first line, then
appends every span it receives to OUT_FILE as one JSON line. Usage: otlp_receiver.py OUT_FILE"""
import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

out_path = sys.argv[1]
lock = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def record(request, transport):
    lines = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                lines.append(json.dumps({
                    "transport": transport,
                    "service": resource.get("service.name"),
                    "scope": scope_spans.scope.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": {a.key: value(a.value) for a in span.attributes},
                    "events": [e.name for e in span.events],
                    "status_code": span.status.code,
                    "status_message": span.status.message,
                }))
    with lock, open(out_path, "a") as f:
        for line in lines:
            f.write(line + "\n")


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(400)
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        record(request, "http")
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


class Grpc(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        record(request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Grpc(), server)
grpc_port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(http.server_address[1], grpc_port, flush=True)
http.serve_forever()
