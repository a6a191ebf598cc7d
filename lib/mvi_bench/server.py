"""A loopback OpenAI-compatible server wrapping a local adapter (demo, tests and benchmark only).

``serve(model, latency=0.2)`` starts ``POST /v1/chat/completions`` on 127.0.0.1 (a free port) in a
thread: it decodes the base64 data-URL image and the prompt text of the one user turn, asks the
wrapped local :class:`~icmlkit.lib.mvi_bench.models.Model` (e.g. the EfficientNet scorer, or a
``hf:PATH`` :class:`~icmlkit.lib.mvi_bench.models.HFVisionModel`, which the tests serve) and answers a
chat completion. The request's ``max_tokens`` and ``temperature`` are not applied: the wrapped model
keeps its own settings. ``latency`` seconds are slept per request (outside any lock) to imitate a remote
model; every payload is kept in ``server.payloads`` (tests check the data URL, temperature and
max_tokens). It binds to 127.0.0.1 only.
"""
from __future__ import annotations

import base64
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from icmlkit.lib.mvi_bench.models import Model, Request
from icmlkit.lib.mvi_bench.protocol import options_from_prompt


class _Handler(BaseHTTPRequestHandler):
    server_version = "mvi-mock/1"

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):  # noqa: N802
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
            content = body["messages"][-1]["content"]
            if isinstance(content, str):  # a text-only turn (e.g. a judge request)
                content = [{"type": "text", "text": content}]
            url = next((c["image_url"]["url"] for c in content if c.get("type") == "image_url"), "data:;base64,")
            prompt = next(c["text"] for c in content if c.get("type") == "text")
            head, b64 = url.split(",", 1)
            image = base64.b64decode(b64)
        except (ValueError, KeyError, StopIteration, TypeError, IndexError, AttributeError):
            self._send(400, {"error": {"message": "expected one user turn with a text part (and an image_url)"}})
            return
        with srv.lock:
            srv.payloads.append({**body, "authorization": self.headers.get("Authorization")})
        if srv.latency:
            time.sleep(srv.latency)
        _, options = options_from_prompt(prompt)
        req = Request("", image, head[5:].split(";")[0], prompt, options, gold="")
        reply = srv.model.answer(req)
        self._send(200, {"id": "mock", "object": "chat.completion", "model": body.get("model"),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                      "finish_reason": "stop"}]})

    def _send(self, code: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve(model: Model, latency: float = 0.0):
    """Run the server while the block runs; yields it (``.url`` is the ``/v1`` base URL,
    ``.spec(name)`` the ``openai://`` model spec)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.model, srv.latency, srv.payloads, srv.lock = model, latency, [], threading.Lock()
    host, port = srv.server_address[:2]
    srv.url = f"http://{host}:{port}/v1"
    srv.spec = lambda name="mock": f"openai://{host}:{port}/v1?model={name}"
    t = threading.Thread(target=srv.serve_forever, name="mvi-mock-server", daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)
