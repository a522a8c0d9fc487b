#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver for the end-to-end tests (see tests/otlp/README.md).

Run it with the venv's python that tests/otlp/install.sh prints:

    receiver.py [--port PORT] [--port-file PATH] [--parent-pid PID] [--strict-json] [--verbose]

It listens on 127.0.0.1 and serves

    POST   /v1/traces  OTLP ExportTraceServiceRequest, application/x-protobuf or
                       application/json (OTLP/JSON), optionally Content-Encoding: gzip
    GET    /spans      {"spans": [...], "errors": [...], "requests": N}
    DELETE /spans      forget every span, error and request
    GET    /health     200 "ok"
"""

import argparse
import base64
import gzip
import json
import math
import os
import re
import signal
import socketserver
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
except ImportError as error:  # pragma: no cover - an environment problem
    sys.exit(
        f"receiver.py: {error}; run it with the python that tests/otlp/install.sh prints"
    )

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# google.rpc.Code INVALID_ARGUMENT and UNIMPLEMENTED, for the error bodies.
RPC_INVALID_ARGUMENT = 3
RPC_UNIMPLEMENTED = 12
HEX = re.compile(r"[0-9a-fA-F]*")


class BadRequest(Exception):
    """The request cannot be accepted: the HTTP status and a message for the client."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class Store:
    """Everything received, shared by the handler threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.spans = []
        self.errors = []
        self.requests = 0

    def count_request(self):
        with self.lock:
            self.requests += 1

    def add_spans(self, spans):
        with self.lock:
            self.spans.extend(spans)

    def add_error(self, message):
        with self.lock:
            self.errors.append(message)

    def snapshot(self):
        with self.lock:
            return {
                "spans": list(self.spans),
                "errors": list(self.errors),
                "requests": self.requests,
            }

    def clear(self):
        with self.lock:
            self.spans.clear()
            self.errors.clear()
            self.requests = 0


# ---------------------------------------------------------------------------------------
# Decoding


def decompress(body, encoding):
    encoding = (encoding or "identity").strip().lower()
    try:
        if encoding == "identity":
            return body
        if encoding in ("gzip", "x-gzip"):
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, EOFError, zlib.error) as error:
        raise BadRequest(400, f"cannot decompress the {encoding} body: {error}") from None
    raise BadRequest(415, f"unsupported Content-Encoding {encoding!r}")


def hex_to_base64(value, where):
    """OTLP/JSON carries ids as hex; the protobuf JSON mapping wants base64."""
    if not isinstance(value, str) or not HEX.fullmatch(value) or len(value) % 2:
        raise BadRequest(400, f"{where}: {value!r} is not a hex-encoded id")
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def field(obj, camel, snake):
    """The key of a field in either spelling the JSON mapping accepts, or None."""
    if camel in obj:
        return camel
    if snake in obj:
        return snake
    return None


def ids_hex_to_base64(request):
    """Rewrites the hex ids of an OTLP/JSON trace request in place."""
    if not isinstance(request, dict):
        raise BadRequest(400, "the OTLP/JSON body is not a JSON object")
    resource_spans = request.get(field(request, "resourceSpans", "resource_spans"))
    for i, rs in enumerate(resource_spans or []):
        if not isinstance(rs, dict):
            continue  # json_format.Parse reports the type error
        scope_spans = rs.get(field(rs, "scopeSpans", "scope_spans"))
        for j, ss in enumerate(scope_spans or []):
            if not isinstance(ss, dict):
                continue
            for k, span in enumerate(ss.get("spans") or []):
                if not isinstance(span, dict):
                    continue
                where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                for camel, snake in (
                    ("traceId", "trace_id"),
                    ("spanId", "span_id"),
                    ("parentSpanId", "parent_span_id"),
                ):
                    key = field(span, camel, snake)
                    if key is not None and span[key] is not None:
                        span[key] = hex_to_base64(span[key], f"{where}.{camel}")
                for m, link in enumerate(span.get("links") or []):
                    if not isinstance(link, dict):
                        continue
                    for camel, snake in (("traceId", "trace_id"), ("spanId", "span_id")):
                        key = field(link, camel, snake)
                        if key is not None and link[key] is not None:
                            link[key] = hex_to_base64(
                                link[key], f"{where}.links[{m}].{camel}"
                            )
    return request


def decode(body, content_type, strict_json):
    request = ExportTraceServiceRequest()
    if content_type == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as error:
            raise BadRequest(400, f"invalid protobuf ExportTraceServiceRequest: {error}") from None
    else:
        try:
            document = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise BadRequest(400, f"invalid JSON: {error}") from None
        document = ids_hex_to_base64(document)
        try:
            json_format.ParseDict(
                document, request, ignore_unknown_fields=not strict_json
            )
        except json_format.ParseError as error:
            raise BadRequest(400, f"invalid OTLP/JSON ExportTraceServiceRequest: {error}") from None
    return request


def check_ids(request):
    """Trace ids are 16 bytes, span ids 8, neither all zeroes; parents empty or 8 bytes."""
    for i, rs in enumerate(request.resource_spans):
        for j, ss in enumerate(rs.scope_spans):
            for k, span in enumerate(ss.spans):
                where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                if len(span.trace_id) != 16 or not any(span.trace_id):
                    raise BadRequest(400, f"{where}: invalid traceId {span.trace_id.hex()!r}")
                if len(span.span_id) != 8 or not any(span.span_id):
                    raise BadRequest(400, f"{where}: invalid spanId {span.span_id.hex()!r}")
                if span.parent_span_id and (
                    len(span.parent_span_id) != 8 or not any(span.parent_span_id)
                ):
                    raise BadRequest(
                        400, f"{where}: invalid parentSpanId {span.parent_span_id.hex()!r}"
                    )


# ---------------------------------------------------------------------------------------
# The /spans view


def any_value(value):
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "double_value":
        number = value.double_value
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "Infinity" if number > 0 else "-Infinity"
        return number
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes(key_values):
    return {kv.key: any_value(kv.value) for kv in key_values}


def enum_name(enum, number):
    try:
        return enum.Name(number)
    except ValueError:
        return str(number)


def span_view(span, resource, scope):
    return {
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex(),
        "traceState": span.trace_state,
        "flags": span.flags,
        "name": span.name,
        "kind": enum_name(Span.SpanKind, span.kind),
        "startTimeUnixNano": span.start_time_unix_nano,
        "endTimeUnixNano": span.end_time_unix_nano,
        "attributes": attributes(span.attributes),
        "status": {
            "code": enum_name(Status.StatusCode, span.status.code),
            "message": span.status.message,
        },
        "resource": resource,
        "scope": scope.name,
        "scopeVersion": scope.version,
        "events": [
            {
                "name": event.name,
                "timeUnixNano": event.time_unix_nano,
                "attributes": attributes(event.attributes),
            }
            for event in span.events
        ],
        "links": [
            {
                "traceId": link.trace_id.hex(),
                "spanId": link.span_id.hex(),
                "attributes": attributes(link.attributes),
            }
            for link in span.links
        ],
    }


def spans_of(request):
    spans = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                spans.append(span_view(span, resource, ss.scope))
    return spans


# ---------------------------------------------------------------------------------------
# Error bodies: google.rpc.Status in the request's content type, as OTLP/HTTP asks.


def varint(number):
    out = bytearray()
    while True:
        byte = number & 0x7F
        number >>= 7
        if number:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def rpc_status(code, message, content_type):
    if content_type == PROTOBUF:
        text = message.encode("utf-8")
        # field 1 (code, varint), field 2 (message, length-delimited)
        return b"\x08" + varint(code) + b"\x12" + varint(len(text)) + text
    return json.dumps({"code": code, "message": message}).encode("utf-8")


# ---------------------------------------------------------------------------------------
# HTTP


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, store, strict_json, verbose):
        self.store = store
        self.strict_json = strict_json
        self.verbose = verbose
        super().__init__(address, Handler)

    def server_bind(self):
        # HTTPServer.server_bind resolves the host's FQDN, which can stall without DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = host
        self.server_port = port

    def handle_error(self, request, client_address):
        if self.verbose:
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "forge-otlp-test-receiver"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if self.server.verbose:
            sys.stderr.write(f"receiver: {self.address_string()} {format % args}\n")

    # -- plumbing

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    raise BadRequest(400, "malformed chunked body") from None
                if size == 0:
                    # trailers, up to the empty line
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise BadRequest(411, "Content-Length is required")
        try:
            length = int(length)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise BadRequest(400, f"invalid Content-Length {length!r}") from None
        return self.rfile.read(length)

    def reply(self, status, body=b"", content_type="text/plain; charset=utf-8"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_json(self, status, document):
        body = json.dumps(document).encode("utf-8")
        self.reply(status, body, JSON)

    def path_only(self):
        return self.path.split("?", 1)[0]

    # -- methods

    def do_GET(self):
        path = self.path_only()
        if path == "/spans":
            self.reply_json(200, self.server.store.snapshot())
        elif path in ("/health", "/healthz", "/"):
            self.reply(200, b"ok\n")
        elif path == "/v1/traces":
            self.reply(405, b"POST an ExportTraceServiceRequest\n")
        else:
            self.reply(404, b"not found\n")

    def do_DELETE(self):
        if self.path_only() == "/spans":
            self.server.store.clear()
            self.reply(200, b"cleared\n")
        else:
            self.reply(404, b"not found\n")

    def do_POST(self):
        path = self.path_only()
        store = self.server.store
        media = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media == "application/protobuf":
            media = PROTOBUF
        reply_type = media if media in (PROTOBUF, JSON) else "text/plain; charset=utf-8"
        try:
            body = self.read_body()
            if path != "/v1/traces":
                raise BadRequest(404, "no such endpoint (traces go to /v1/traces)")
            store.count_request()
            if media not in (PROTOBUF, JSON):
                raise BadRequest(
                    415,
                    f"unsupported Content-Type {self.headers.get('Content-Type')!r} "
                    f"(expected {PROTOBUF} or {JSON})",
                )
            body = decompress(body, self.headers.get("Content-Encoding"))
            request = decode(body, media, self.server.strict_json)
            check_ids(request)
            store.add_spans(spans_of(request))
        except BadRequest as error:
            store.add_error(f"POST {path}: {error.status} {error.message}")
            if reply_type in (PROTOBUF, JSON):
                code = RPC_UNIMPLEMENTED if error.status == 404 else RPC_INVALID_ARGUMENT
                self.reply(error.status, rpc_status(code, error.message, reply_type), reply_type)
            else:
                self.reply(error.status, (error.message + "\n").encode("utf-8"))
            return
        except Exception as error:  # a bug here: tell the test rather than hang it
            store.add_error(f"POST {path}: 500 {type(error).__name__}: {error}")
            self.close_connection = True
            self.reply(500, f"{type(error).__name__}: {error}\n".encode("utf-8"))
            return
        response = ExportTraceServiceResponse()
        if media == PROTOBUF:
            self.reply(200, response.SerializeToString(), PROTOBUF)
        else:
            self.reply(200, json_format.MessageToJson(response).encode("utf-8"), JSON)


# ---------------------------------------------------------------------------------------
# Main


def write_port_file(path, port):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as out:
        out.write(f"{port}\n")
    os.replace(tmp, path)


def parent_alive(pid, original_ppid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    # A dead parent that is not reaped yet still answers kill(0); reparenting tells.
    return not (pid == original_ppid and os.getppid() != pid)


def main():
    parser = argparse.ArgumentParser(description="OTLP/HTTP trace receiver for tests")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any)")
    parser.add_argument("--port-file", help="write the bound port here once listening")
    parser.add_argument(
        "--parent-pid", type=int, help="exit when this process is gone (checked every second)"
    )
    parser.add_argument(
        "--strict-json",
        action="store_true",
        help="reject OTLP/JSON with unknown fields (the spec says to ignore them)",
    )
    parser.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    original_ppid = os.getppid()

    server = Server(("127.0.0.1", args.port), Store(), args.strict_json, args.verbose)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2})
    thread.daemon = True
    thread.start()
    if args.port_file:
        write_port_file(args.port_file, port)
    print(f"listening on 127.0.0.1:{port}", flush=True)

    while not stop.wait(1.0):
        if args.parent_pid is not None and not parent_alive(args.parent_pid, original_ppid):
            if args.verbose:
                sys.stderr.write(f"receiver: parent {args.parent_pid} is gone, exiting\n")
            break
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
