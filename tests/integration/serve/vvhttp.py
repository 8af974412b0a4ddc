"""A small HTTP/1.1 client on raw sockets for the conformance tests: exact control over the bytes sent
(header order and case, duplicate fields, broken framing, Expect: 100-continue, half-closes) and
visibility of what comes back (interim 1xx responses, whether the server closed the connection, SSE
frames as they arrive). Standard library only."""
import json
import re
import socket
import time
import uuid


class Headers:
    def __init__(self, items):
        self.items = items  # [(name, value)] as received

    def get(self, name, default=None):
        n = name.lower()
        for k, v in self.items:
            if k.lower() == n:
                return v
        return default

    def get_all(self, name):
        n = name.lower()
        return [v for k, v in self.items if k.lower() == n]

    def __contains__(self, name):
        return self.get(name) is not None

    def names(self):
        return [k.lower() for k, _ in self.items]

    def __repr__(self):
        return repr(self.items)


class Response:
    def __init__(self, status, reason, headers, body, interim=(), closed=False):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.interim = list(interim)  # statuses of 1xx responses received before this one
        self.closed = closed          # the server closed the connection after this response

    @property
    def text(self):
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.headers.get('content-type')} {self.body[:300]!r}>"


class Closed(Exception):
    pass


class Conn:
    """One client connection. `send` writes bytes; `read_response` parses the next response."""

    def __init__(self, port, host="127.0.0.1", timeout=60):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False
        self.port = port

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def settimeout(self, t):
        self.sock.settimeout(t)

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def shutdown_write(self):
        self.sock.shutdown(socket.SHUT_WR)

    def _fill(self):
        if self.eof:
            raise Closed("connection closed by the server")
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError as e:
            self.eof = True
            raise Closed(f"connection reset: {e}") from e
        if not chunk:
            self.eof = True
            raise Closed("connection closed by the server")
        self.buf += chunk

    def _read_until(self, sep):
        while sep not in self.buf:
            self._fill()
        i = self.buf.index(sep)
        out, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return out

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        """Reads one status line + header block; returns (status, reason, Headers)."""
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3}) ?(.*)", lines[0])
        if not m:
            raise ValueError(f"bad status line {lines[0]!r}")
        items = []
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            items.append((k.strip(), v.strip()))
        return int(m.group(1)), m.group(2), Headers(items)

    def read_response(self, method="GET"):
        interim = []
        while True:
            status, reason, headers = self.read_head()
            if 100 <= status < 200 and status != 101:
                interim.append(status)
                continue
            break
        body = self.read_body(status, headers, method)
        return Response(status, reason, headers, body, interim, closed=self.server_closed(headers))

    def read_body(self, status, headers, method="GET"):
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return b""
        te = (headers.get("transfer-encoding") or "").lower()
        if "chunked" in te:
            return b"".join(self.iter_chunks())
        cl = headers.get("content-length")
        if cl is not None:
            return self._read_exact(int(cl))
        out = self.buf
        self.buf = b""
        try:
            while True:
                self._fill()
                out += self.buf
                self.buf = b""
        except Closed:
            pass
        return out

    def iter_chunks(self):
        """Yields the data of each chunk of a chunked body as it arrives."""
        while True:
            size_line = self._read_until(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                # trailers until the empty line
                while self._read_until(b"\r\n") != b"":
                    pass
                return
            data = self._read_exact(size)
            self._read_exact(2)
            yield data

    def server_closed(self, headers=None):
        if headers is not None and "close" in (headers.get("connection") or "").lower():
            return True
        return False

    def wait_closed(self, timeout):
        """True when the server closes (EOF or reset) within `timeout` s; bytes received meanwhile are
        kept in the buffer."""
        end = time.time() + timeout
        old = self.sock.gettimeout()
        try:
            while time.time() < end:
                self.sock.settimeout(max(0.01, end - time.time()))
                try:
                    self._fill()
                except Closed:
                    return True
                except socket.timeout:
                    return False
            return False
        finally:
            try:
                self.sock.settimeout(old)
            except OSError:
                pass


def build_request(method, path, headers=None, body=None, host="127.0.0.1", auto_length=True):
    hs = list((headers or {}).items()) if isinstance(headers, dict) else list(headers or [])
    names = {k.lower() for k, _ in hs}
    if "host" not in names:
        hs.insert(0, ("Host", host))
    if isinstance(body, str):
        body = body.encode()
    if body is not None and auto_length and "content-length" not in names and "transfer-encoding" not in names:
        hs.append(("Content-Length", str(len(body))))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hs) + "\r\n"
    return head.encode("latin-1") + (body or b"")


def request(port, method, path, body=None, headers=None, timeout=60):
    """One request on a fresh connection; the connection is closed afterwards."""
    with Conn(port, timeout=timeout) as c:
        c.send(build_request(method, path, headers, body))
        return c.read_response(method)


# ---- SSE ------------------------------------------------------------------------------------------
class SSE:
    """Reads an event stream response: `frames` are the raw frames (without the blank line) in order,
    with their arrival times."""

    def __init__(self, conn, method="POST"):
        self.conn = conn
        self.status, self.reason, self.headers = None, None, None
        while True:
            self.status, self.reason, self.headers = conn.read_head()
            if not (100 <= self.status < 200):
                break
        self.frames = []
        self.body = b""
        self.error_body = None
        if self.status != 200 or "text/event-stream" not in (self.headers.get("content-type") or ""):
            self.error_body = conn.read_body(self.status, self.headers, method)

    def __iter__(self):
        """Yields (time, frame_text) for each frame until the body ends."""
        pending = b""
        te = (self.headers.get("transfer-encoding") or "").lower()
        source = self.conn.iter_chunks() if "chunked" in te else self._until_close()
        for data in source:
            self.body += data
            pending += data
            while b"\n\n" in pending:
                frame, pending = pending.split(b"\n\n", 1)
                t = time.time()
                self.frames.append((t, frame.decode("utf-8")))
                yield t, frame.decode("utf-8")
        if pending.strip():
            self.frames.append((time.time(), pending.decode("utf-8", errors="replace")))

    def _until_close(self):
        try:
            while True:
                if self.conn.buf:
                    d, self.conn.buf = self.conn.buf, b""
                    yield d
                self.conn._fill()
        except Closed:
            return

    def read_all(self):
        for _ in self:
            pass
        return self

    def data_objects(self):
        """The JSON objects of the `data:` frames, in order (the [DONE] marker excluded)."""
        out = []
        for _, f in self.frames:
            if f.startswith("data: ") and f != "data: [DONE]":
                out.append(json.loads(f[len("data: "):]))
        return out


def sse_request(port, method, path, body, headers, timeout=120):
    c = Conn(port, timeout=timeout)
    c.send(build_request(method, path, headers, body))
    return SSE(c)


# ---- multipart --------------------------------------------------------------------------------------
class Multipart:
    def __init__(self, boundary=None):
        self.boundary = boundary or ("vvtest" + uuid.uuid4().hex)
        self.parts = []  # raw bytes of each part (headers + body), without delimiters

    @property
    def content_type(self):
        return f"multipart/form-data; boundary={self.boundary}"

    def raw_part(self, headers, body):
        if isinstance(body, str):
            body = body.encode()
        h = "".join(f"{k}: {v}\r\n" for k, v in headers)
        self.parts.append(h.encode("utf-8") + b"\r\n" + body)
        return self

    def field(self, name, value):
        return self.raw_part([("Content-Disposition", f'form-data; name="{name}"')], value)

    def file(self, name, data, filename="audio.wav", ctype="audio/wav"):
        cd = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        hs = [("Content-Disposition", cd)]
        if ctype is not None:
            hs.append(("Content-Type", ctype))
        return self.raw_part(hs, data)

    def body(self, closing=True):
        b = self.boundary.encode()
        out = b""
        for p in self.parts:
            out += b"--" + b + b"\r\n" + p + b"\r\n"
        if closing:
            out += b"--" + b + b"--\r\n"
        return out


# ---- errors and metrics -----------------------------------------------------------------------------
ERROR_CODES = {
    "invalid_json", "invalid_multipart", "bad_http_request", "missing_required_parameter", "invalid_type",
    "invalid_value", "duplicate_parameter", "unsupported_value", "unsupported_parameter", "empty_file",
    "invalid_file_format", "invalid_audio", "audio_too_short", "audio_too_long", "context_length_exceeded",
    "translation_unsupported", "missing_api_key", "invalid_api_key", "origin_not_allowed", "model_not_found",
    "unknown_url", "method_not_allowed", "request_timeout", "request_too_large", "uri_too_long",
    "unsupported_media_type", "upgrade_required", "rate_limit_exceeded", "headers_too_large",
    "internal_error", "engine_error", "model_not_ready", "server_overloaded", "queue_timeout",
    "shutting_down", "too_many_connections", "deadline_exceeded"}
ERROR_TYPES = {"invalid_request_error", "authentication_error", "permission_error", "rate_limit_error",
               "server_error"}
CODE_STATUS = {
    "invalid_json": 400, "invalid_multipart": 400, "bad_http_request": 400, "missing_required_parameter": 400,
    "invalid_type": 400, "invalid_value": 400, "duplicate_parameter": 400, "unsupported_value": 400,
    "unsupported_parameter": 400, "empty_file": 400, "invalid_file_format": 400, "invalid_audio": 400,
    "audio_too_short": 400, "audio_too_long": 400, "context_length_exceeded": 400,
    "translation_unsupported": 400, "missing_api_key": 401, "invalid_api_key": 401, "origin_not_allowed": 403,
    "model_not_found": 404, "unknown_url": 404, "method_not_allowed": 405, "request_timeout": 408,
    "request_too_large": 413, "uri_too_long": 414, "unsupported_media_type": 415, "upgrade_required": 426,
    "rate_limit_exceeded": 429, "headers_too_large": 431, "internal_error": 500, "engine_error": 500,
    "model_not_ready": 503, "server_overloaded": 503, "queue_timeout": 503, "shutting_down": 503,
    "too_many_connections": 503, "deadline_exceeded": 504}
CODE_TYPE = {"missing_api_key": "authentication_error", "invalid_api_key": "authentication_error",
             "origin_not_allowed": "permission_error", "rate_limit_exceeded": "rate_limit_error",
             "internal_error": "server_error", "engine_error": "server_error", "model_not_ready": "server_error",
             "server_overloaded": "server_error", "queue_timeout": "server_error", "shutting_down": "server_error",
             "too_many_connections": "server_error", "deadline_exceeded": "server_error"}


def check_envelope(obj):
    """C9: the body is an object whose only key is `error` with the four members of §0.3."""
    assert isinstance(obj, dict) and list(obj.keys()) == ["error"], obj
    e = obj["error"]
    assert isinstance(e.get("message"), str) and e["message"], e
    assert "\n" not in e["message"], e
    assert e.get("type") in ERROR_TYPES, e
    assert "param" in e and (e["param"] is None or isinstance(e["param"], str)), e
    assert isinstance(e.get("code"), str) and e["code"] in ERROR_CODES, e
    assert e["type"] == CODE_TYPE.get(e["code"], "invalid_request_error"), e
    return e


def assert_error(r, status, code, param=Ellipsis):
    """The response is `status` with the §0.3 envelope carrying `code` (and `param` when given)."""
    assert r.status == status, f"expected {status} {code}, got {r}"
    ct = r.headers.get("content-type") or ""
    assert ct == "application/json", f"error Content-Type {ct!r}"
    assert r.headers.get("x-request-id"), r.headers
    e = check_envelope(r.json())
    assert e["code"] == code, e
    assert CODE_STATUS[code] == status
    if param is not Ellipsis:
        assert e["param"] == param, e
    return e


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    def __init__(self, text):
        self.text = text
        self.types = {}
        self.samples = []  # (name, {labels}, value)
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, typ = line.split(None, 3)
                self.types[name] = typ.strip()
            elif line and not line.startswith("#"):
                m = _SAMPLE.match(line)
                if not m:
                    raise ValueError(f"unparsable metrics line {line!r}")
                labels = dict(_LABEL.findall(m.group(3) or ""))
                self.samples.append((m.group(1), labels, float(m.group(4))))

    def get(self, name, default=0.0, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        total, found = 0.0, False
        for n, ls, v in self.samples:
            if n == name and all(ls.get(k) == str(val) for k, val in labels.items()):
                total += v
                found = True
        return total if found else default

    def has(self, name, **labels):
        return any(n == name and all(ls.get(k) == str(v) for k, v in labels.items()) for n, ls, _ in self.samples)

    def labelsets(self, name):
        return [ls for n, ls, _ in self.samples if n == name]


def parse_metrics(text):
    return Metrics(text)
