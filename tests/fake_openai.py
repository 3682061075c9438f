"""A fake OpenAI-compatible chat server on loopback, for the tests that talk to an LLM
endpoint through the real ``openai`` client (no network, no model)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAIServer:
    """A real HTTP server on 127.0.0.1 answering ``POST /v1/chat/completions``.

    ``answer(messages) -> str`` scripts the reply; ``fail_first`` requests get HTTP 500;
    ``delay`` seconds per request; records every request and the peak concurrency seen.
    """

    def __init__(self, answer=lambda messages: "It has been patched in 1.15.0.", fail_first=0, delay=0.0):
        self.answer, self.fail_first, self.delay = answer, fail_first, delay
        self.requests: list[dict] = []
        self.in_flight = self.peak = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    number = len(server.requests)
                    server.in_flight += 1
                    server.peak = max(server.peak, server.in_flight)
                try:
                    time.sleep(server.delay)
                    if not self.path.endswith("/chat/completions"):
                        return self._send(404, {"error": {"message": "not found"}})
                    if number <= server.fail_first:
                        return self._send(500, {"error": {"message": "scripted failure", "type": "server_error"}})
                    content = server.answer(body["messages"])
                    self._send(
                        200,
                        {
                            "id": f"chatcmpl-{number}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": body["model"],
                            "choices": [
                                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                            ],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        },
                    )
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                try:
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
