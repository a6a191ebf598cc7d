"""A minimal client for OpenAI-compatible chat endpoints (``POST {base_url}/chat/completions``).

Standard library only (urllib), so any tool can use it without the vendor SDKs. The API key is read
from an environment variable (never written to manifests or logs). Every request is counted in
``calls`` so tools can report their LLM cost.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from icmlkit.lib.core.errors import IcmlkitError


class LLMError(IcmlkitError):
    """The endpoint failed or answered something that is not a chat completion (exit 1)."""


class ChatClient:
    def __init__(self, base_url: str, model: str = "default", api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 60.0, max_retries: int = 1):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = os.environ.get(api_key_env, "")
        self.timeout = timeout
        self.max_retries = max_retries
        self.calls = 0

    def chat(self, messages: list[dict], temperature: float = 0.0, max_tokens: int = 16) -> str:
        """One chat completion; returns the text of the first choice."""
        body = json.dumps({"model": self.model, "messages": messages, "temperature": temperature,
                           "max_tokens": max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = None
        for _ in range(self.max_retries + 1):
            self.calls += 1
            req = urllib.request.Request(self.base_url + "/chat/completions", data=body, headers=headers,
                                         method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    data = json.loads(resp.read().decode("utf-8"))
                return str(data["choices"][0]["message"]["content"] or "")
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code < 500:
                    break
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
            except (ValueError, KeyError, IndexError, TypeError):
                raise LLMError(f"{self.base_url}: the answer is not a chat completion") from None
        raise LLMError(f"{self.base_url}: request failed ({last})")
