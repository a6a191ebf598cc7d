"""ChatClient against a local stub server: order, concurrency, retries, Retry-After, timeouts, bad answers."""
from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from icmlkit.lib.llm import ChatClient, LLMError, LLMTimeout
from icmlkit.lib.llm.client import parse_retry_after


class _Stub(http.server.BaseHTTPRequestHandler):
    """Scenario chosen by the last message's content: ``ok:X`` (answers X), ``fail-once:X`` (500 then X),
    ``429:X`` (429 with Retry-After: 2, then X), ``slow:X`` (sleeps 1 s), ``garbage``, ``bad-shape``,
    ``400``, ``401``, ``always-500``, ``wait:X`` (waits until ``expect`` requests are in flight)."""

    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    cond = threading.Condition(lock)
    seen: list = []
    hits: dict = {}
    inflight = 0
    max_inflight = 0
    expect = 0

    def log_message(self, *a):
        pass

    def _send(self, code: int, body: bytes, headers: dict | None = None):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, text: str):
        self._send(200, json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode())

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["messages"][-1]["content"]
        cls = type(self)
        with cls.lock:
            cls.seen.append({"body": body, "auth": self.headers.get("Authorization")})
            n = cls.hits[content] = cls.hits.get(content, 0) + 1
            cls.inflight += 1
            cls.max_inflight = max(cls.max_inflight, cls.inflight)
            cls.cond.notify_all()
        try:
            kind, _, arg = content.partition(":")
            if kind == "ok":
                self._answer(arg)
            elif kind == "wait":
                with cls.cond:  # hold the request until all expected ones are in flight (or 5 s)
                    cls.cond.wait_for(lambda: cls.inflight >= cls.expect, timeout=5)
                time.sleep(0.02 * (10 - int(arg)))  # later items finish first
                self._answer(arg)
            elif kind == "fail-once":
                self._send(500, b'{"error": {"message": "boom"}}') if n == 1 else self._answer(arg)
            elif kind == "429":
                self._send(429, b'{"error": "slow down"}', {"Retry-After": "2"}) if n == 1 else self._answer(arg)
            elif kind == "slow":
                time.sleep(1.0)
                self._answer(arg)
            elif kind == "garbage":
                self._send(200, b"<html>not json")
            elif kind == "bad-shape":
                self._send(200, b'{"choices": []}')
            elif kind in ("400", "401"):
                self._send(int(kind), b'{"error": {"message": "nope"}}')
            elif kind == "always-500":
                self._send(503, b"{}")
            else:
                self._send(404, b"{}")
        finally:
            with cls.lock:
                cls.inflight -= 1


@pytest.fixture
def stub():
    _Stub.seen, _Stub.hits, _Stub.inflight, _Stub.max_inflight, _Stub.expect = [], {}, 0, 0, 0
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def msg(text):
    return [{"role": "user", "content": text}]


class Sleeps(list):
    def __call__(self, seconds):
        self.append(seconds)


def test_plain_answer_counts_and_sends_model(stub):
    c = ChatClient(stub, "m1", sleep=Sleeps())
    assert c.chat(msg("ok:hello"), max_tokens=5, stop=["\n"]) == "hello"
    assert c.calls == 1 and c.retries == 0
    sent = _Stub.seen[-1]["body"]
    assert sent["model"] == "m1" and sent["max_tokens"] == 5 and sent["stop"] == ["\n"]


def test_chat_many_keeps_order_and_really_overlaps(stub):
    _Stub.expect = 8
    c = ChatClient(stub, sleep=Sleeps())
    out = c.chat_many([msg(f"wait:{i}") for i in range(8)], max_workers=8)
    assert out == [str(i) for i in range(8)]
    assert _Stub.max_inflight == 8  # all eight requests were open at the same time
    assert c.calls == 8


def test_chat_many_with_fewer_workers_bounds_concurrency(stub):
    c = ChatClient(stub, sleep=Sleeps())
    out = c.chat_many([msg(f"ok:{i}") for i in range(12)], max_workers=3)
    assert out == [str(i) for i in range(12)]
    assert 1 <= _Stub.max_inflight <= 3 and c.calls == 12


def test_500_then_200_is_retried_with_deterministic_backoff(stub):
    sleeps = Sleeps()
    c = ChatClient(stub, max_retries=2, backoff=0.5, seed=7, sleep=sleeps)
    assert c.chat(msg("fail-once:x")) == "x"
    assert _Stub.hits["fail-once:x"] == 2 and c.calls == 2 and c.retries == 1
    assert len(sleeps) == 1 and 0.25 <= sleeps[0] < 0.5
    assert sleeps[0] == ChatClient(stub, seed=7).backoff_delay(0, 0)  # same seed, same key -> same wait
    assert ChatClient(stub, seed=8).backoff_delay(0, 0) != sleeps[0]
    d = [c.backoff_delay(3, a) for a in range(4)]
    assert all(0.5 * 0.5 * 2 ** a <= x < 0.5 * 2 ** a for a, x in enumerate(d))


def test_429_honours_retry_after(stub):
    sleeps = Sleeps()
    c = ChatClient(stub, max_retries=1, sleep=sleeps)
    assert c.chat(msg("429:y")) == "y"
    assert sleeps == [2.0] and c.calls == 2
    assert parse_retry_after("3") == 3.0 and parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)


def test_retries_are_spent_on_persistent_5xx(stub):
    sleeps = Sleeps()
    c = ChatClient(stub, max_retries=3, sleep=sleeps)
    with pytest.raises(LLMError, match="after 4 attempts.*HTTP 503") as ei:
        c.chat(msg("always-500"))
    assert ei.value.status == 503 and _Stub.hits["always-500"] == 4 and len(sleeps) == 3


@pytest.mark.parametrize("code", ["400", "401"])
def test_other_4xx_fail_at_once_and_never_show_the_key(stub, monkeypatch, code):
    monkeypatch.setenv("ICMLKIT_TEST_KEY", "sk-secret-123")
    c = ChatClient(stub, api_key_env="ICMLKIT_TEST_KEY", sleep=Sleeps())
    with pytest.raises(LLMError, match=f"HTTP {code}: nope") as ei:
        c.chat(msg(code))
    assert _Stub.hits[code] == 1 and c.calls == 1
    assert _Stub.seen[-1]["auth"] == "Bearer sk-secret-123"
    assert "sk-secret" not in str(ei.value) and "sk-secret" not in repr(c)


def test_slow_answer_times_out_after_retries(stub):
    sleeps = Sleeps()
    c = ChatClient(stub, timeout=0.3, max_retries=1, sleep=sleeps)
    with pytest.raises(LLMTimeout, match="timed out after 0.3 s"):
        c.chat(msg("slow:z"))
    assert _Stub.hits["slow:z"] == 2 and c.calls == 2 and len(sleeps) == 1


@pytest.mark.parametrize("kind, match", [("garbage", "not JSON"), ("bad-shape", "not a chat completion")])
def test_garbage_answers_fail_without_retry(stub, kind, match):
    c = ChatClient(stub, max_retries=3, sleep=Sleeps())
    with pytest.raises(LLMError, match=match):
        c.chat(msg(kind))
    assert c.calls == 1


def test_connection_refused_is_retried_then_fails():
    sleeps = Sleeps()
    c = ChatClient("http://user:pw@127.0.0.1:9/v1", max_retries=2, timeout=2, sleep=sleeps)
    with pytest.raises(LLMError, match="connection failed") as ei:
        c.chat(msg("ok:x"))
    assert c.calls == 3 and len(sleeps) == 2 and "pw" not in str(ei.value)


def test_chat_many_errors_in_input_order_or_as_values(stub):
    c = ChatClient(stub, max_retries=0, sleep=Sleeps())
    convs = [msg("ok:a"), msg("400"), msg("garbage"), msg("ok:d")]
    with pytest.raises(LLMError, match="HTTP 400"):
        c.chat_many(convs, max_workers=4)
    out = c.chat_many(convs, max_workers=2, return_exceptions=True)
    assert out[0] == "a" and out[3] == "d"
    assert isinstance(out[1], LLMError) and out[1].status == 400 and isinstance(out[2], LLMError)
    assert c.chat_many([]) == []


def test_counter_is_thread_safe(stub):
    c = ChatClient(stub, sleep=Sleeps())
    c.chat_many([msg(f"ok:{i}") for i in range(40)], max_workers=8)
    assert c.calls == 40 and _Stub.hits.keys() == {f"ok:{i}" for i in range(40)}


def test_bad_settings_are_usage_errors():
    from icmlkit.lib.core.errors import UsageError

    for kw in ({"timeout": 0}, {"max_retries": -1}, {"max_workers": 0}):
        with pytest.raises(UsageError):
            ChatClient("http://127.0.0.1:1/v1", **kw)
    with pytest.raises(UsageError):
        ChatClient("ftp://example/v1")
