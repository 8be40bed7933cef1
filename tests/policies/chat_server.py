"""A tiny local chat-completions server for remote-endpoint tests (no real network)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    """Answers POST /v1/chat/completions with ``reply(body) -> (status, payload)``."""

    def __init__(self):
        self.requests: list[tuple[str, dict, dict]] = []
        self.reply = lambda body: (200, completion("I hold the king, so [Bet]"))
        self.delay_s = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, dict(self.headers), body))
                time.sleep(server.delay_s)
                status, payload = server.reply(body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except BrokenPipeError:
                    pass  # the client gave up waiting (the timeout test)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()


def completion(content):
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}


def serving_fake(monkeypatch):
    """A ``FakeServer`` reached without a proxy, shut down after the test (a fixture's body)."""
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    fake = FakeServer()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()
