"""A client for OpenAI-compatible chat endpoints (``POST {base_url}/chat/completions``).

Standard library only (urllib and a thread pool), so any tool can use it without the vendor SDKs.

- The API key is read from an environment variable and sent as a bearer token; it never appears
  in messages, errors, ``repr`` or manifests.
- :meth:`ChatClient.chat` sends one request; :meth:`ChatClient.chat_many` sends many at once on a
  thread pool (``max_workers`` in flight) and returns the answers in input order.
- Failed requests are retried on HTTP 429, HTTP 5xx, connection errors and timeouts, up to
  ``max_retries`` times, waiting ``Retry-After`` when the server sends it and otherwise an
  exponential backoff ``min(max_backoff, backoff * 2**attempt)`` scaled by a jitter factor in
  [0.5, 1). The jitter comes from a generator seeded with ``(seed, request key, attempt)``, so
  the waits are the same from run to run. Other 4xx answers and answers that are not a chat
  completion fail at once.
- ``timeout`` bounds each request: the wait for the answer's headers and the time spent reading it.
- ``calls`` counts every HTTP request sent (retries included, thread-safe), so tools can report
  their LLM cost; ``retries`` counts the retried ones.
"""
from __future__ import annotations

import email.utils
import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from icmlkit.lib.core.errors import IcmlkitError, UsageError

RETRY_STATUS = frozenset({429, 500, 502, 503, 504}) | frozenset(range(505, 600))


class LLMError(IcmlkitError):
    """The endpoint failed or answered something that is not a chat completion (exit 1)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class LLMTimeout(LLMError):
    """The endpoint did not answer within the timeout (after the retries)."""


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None, status: int | None = None,
                 timeout: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.status = status
        self.timeout = timeout


def _public_url(url: str) -> str:
    """``url`` without user information or query string (those may hold credentials)."""
    try:
        p = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid url>"
    host = p.hostname or ""
    if p.port:
        host += f":{p.port}"
    return urllib.parse.urlunsplit((p.scheme, host, p.path, "", ""))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent/bad."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def parse_endpoint(spec: str, option: str = "--model") -> tuple[str, str]:
    """An endpoint written as ``openai://HOST:PORT/v1?model=NAME`` (``openais://`` for HTTPS) ->
    (``http://HOST:PORT/v1``, NAME), the base URL and model a :class:`ChatClient` takes; errors
    name ``option``."""
    scheme = "https" if spec.startswith("openais://") else "http"
    rest = spec.split("://", 1)[1]
    try:
        parts = urllib.parse.urlsplit(f"{scheme}://{rest}")
        query = urllib.parse.parse_qs(parts.query)
    except ValueError:
        raise UsageError(f"{option} {spec!r}: not a URL") from None
    if not parts.hostname:
        raise UsageError(f"{option} {spec!r}: no host; write openai://HOST:PORT/v1?model=NAME")
    name = (query.get("model") or ["default"])[0]
    base = urllib.parse.urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") or "/v1", "", ""))
    return base, name


class ChatClient:
    """An OpenAI-compatible chat client with retries, timeouts and concurrent batches.

    ``base_url`` ends before ``/chat/completions`` (e.g. ``http://127.0.0.1:8000/v1``); ``model``
    is sent as the request's model; the API key is read from ``$<api_key_env>`` (optional).
    ``sleep`` is the function used to wait between retries (tests pass a recorder).
    """

    def __init__(self, base_url: str, model: str = "default", api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 60.0, max_retries: int = 3, *, backoff: float = 0.5, max_backoff: float = 30.0,
                 max_retry_after: float = 120.0, seed: int = 0, max_workers: int = 4,
                 sleep: Callable[[float], None] = time.sleep):
        if not str(base_url).startswith(("http://", "https://")):
            raise UsageError(f"the endpoint URL must start with http:// or https://, not {_public_url(str(base_url))!r}")
        if timeout <= 0:
            raise UsageError(f"timeout must be positive, not {timeout}")
        if max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, not {max_retries}")
        if max_workers < 1:
            raise UsageError(f"max_workers must be at least 1, not {max_workers}")
        self.base_url = str(base_url).rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self._api_key = os.environ.get(api_key_env, "")
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_retry_after = float(max_retry_after)
        self.seed = int(seed)
        self.max_workers = int(max_workers)
        self._sleep = sleep
        self._lock = threading.Lock()
        self._calls = 0
        self._retries = 0
        self._next_key = 0

    def __repr__(self) -> str:
        key = "set" if self._api_key else "unset"
        return (f"ChatClient({_public_url(self.base_url)!r}, model={self.model!r}, api key ${self.api_key_env} {key}, "
                f"timeout={self.timeout}, max_retries={self.max_retries})")

    # ------------------------------------------------------------------------------- counters

    @property
    def calls(self) -> int:
        """HTTP requests sent so far (retries included)."""
        with self._lock:
            return self._calls

    @property
    def retries(self) -> int:
        """Requests that were retries of a failed one."""
        with self._lock:
            return self._retries

    def _count(self, retry: bool) -> None:
        with self._lock:
            self._calls += 1
            if retry:
                self._retries += 1

    def _new_key(self) -> int:
        with self._lock:
            self._next_key += 1
            return self._next_key - 1

    # ---------------------------------------------------------------------------------- waits

    def backoff_delay(self, key: int, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``attempt + 1`` of request ``key`` (deterministic given the seed)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        rng = random.Random(f"{self.seed}/{key}/{attempt}")
        return min(self.max_backoff, self.backoff * 2.0 ** attempt) * (0.5 + 0.5 * rng.random())

    # ------------------------------------------------------------------------------- requests

    def _request(self, body: bytes) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body, headers=headers, method="POST")
        deadline = time.monotonic() + self.timeout
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                chunks = []
                while True:
                    if time.monotonic() > deadline:
                        raise _Retryable(f"timed out after {self.timeout:g} s", timeout=True)
                    chunk = resp.read(1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
                raw = b"".join(chunks)
        except urllib.error.HTTPError as exc:
            detail = ""
            try:
                err = json.loads(exc.read(4096).decode("utf-8", "replace"))
                msg = err.get("error", {}).get("message") if isinstance(err.get("error"), dict) else err.get("error")
                if msg:
                    detail = ": " + " ".join(str(msg).split())[:200]
            except (ValueError, AttributeError, OSError):
                pass
            if exc.code in RETRY_STATUS:
                raise _Retryable(f"HTTP {exc.code}{detail}", parse_retry_after(exc.headers.get("Retry-After")),
                                 status=exc.code) from None
            raise LLMError(f"{_public_url(self.base_url)}: request refused (HTTP {exc.code}{detail})",
                           status=exc.code) from None
        except (TimeoutError, socket.timeout):
            raise _Retryable(f"timed out after {self.timeout:g} s", timeout=True) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise _Retryable(f"timed out after {self.timeout:g} s", timeout=True) from None
            raise _Retryable(f"connection failed ({reason})") from None
        except (ConnectionError, OSError) as exc:  # reset while reading, broken pipe, ...
            raise _Retryable(f"connection failed ({type(exc).__name__}: {exc})") from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise LLMError(f"{_public_url(self.base_url)}: the answer is not JSON (a chat completion was expected)") \
                from None
        return data

    def _chat(self, key: int, messages: list[dict], temperature: float, max_tokens: int, params: dict) -> str:
        payload = {"model": self.model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens}
        payload.update(params)
        body = json.dumps(payload).encode("utf-8")
        last: _Retryable | None = None
        for attempt in range(self.max_retries + 1):
            if last is not None:
                self._sleep(self.backoff_delay(key, attempt - 1, last.retry_after))
            self._count(retry=attempt > 0)
            try:
                data = self._request(body)
            except _Retryable as exc:
                last = exc
                continue
            try:
                content = data["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                raise LLMError(f"{_public_url(self.base_url)}: the answer is not a chat completion "
                               "(no choices[0].message.content)") from None
            return "" if content is None else str(content)
        assert last is not None
        tries = self.max_retries + 1
        msg = f"{_public_url(self.base_url)}: request failed after {tries} attempt{'s' * (tries > 1)} ({last.reason})"
        if last.timeout:
            raise LLMTimeout(msg)
        raise LLMError(msg, status=last.status)

    def chat(self, messages: list[dict], temperature: float = 0.0, max_tokens: int = 16, **params) -> str:
        """One chat completion; returns the text of the first choice.

        ``params`` are extra request fields (``stop``, ``seed``, ``top_p``, ...). Raises
        :class:`LLMTimeout` or :class:`LLMError` when the retries are spent or the answer is unusable.
        """
        return self._chat(self._new_key(), messages, temperature, max_tokens, params)

    def chat_many(self, conversations: list[list[dict]], max_workers: int | None = None, *,
                  temperature: float = 0.0, max_tokens: int = 16, return_exceptions: bool = False,
                  **params) -> list:
        """Chat completions for many conversations at once, ``max_workers`` requests in flight.

        Returns the answers in input order. A failure raises the first failed conversation's error
        (in input order) once the requests in flight have finished, the ones not started are
        cancelled; with ``return_exceptions`` the error objects take the failed answers' places.
        Retry waits are keyed by the conversation's position, so they do not depend on scheduling.
        """
        convs = list(conversations)
        if not convs:
            return []
        workers = self.max_workers if max_workers is None else int(max_workers)
        if workers < 1:
            raise UsageError(f"max_workers must be at least 1, not {workers}")
        base = self._new_keys(len(convs))
        with ThreadPoolExecutor(max_workers=min(workers, len(convs)), thread_name_prefix="icmlkit-llm") as pool:
            futures = [pool.submit(self._chat, base + i, m, temperature, max_tokens, params)
                       for i, m in enumerate(convs)]
            out = []
            for fut in futures:
                try:
                    out.append(fut.result())
                except LLMError as exc:
                    if not return_exceptions:
                        for f in futures:
                            f.cancel()
                        raise
                    out.append(exc)
        return out

    def _new_keys(self, n: int) -> int:
        with self._lock:
            first = self._next_key
            self._next_key += n
            return first
