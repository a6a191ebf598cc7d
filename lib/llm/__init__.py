"""Clients for language-model endpoints shared by the tools (OpenAI-compatible chat, stdlib only)."""
from icmlkit.lib.llm.client import ChatClient, LLMError, LLMTimeout, parse_endpoint

__all__ = ["ChatClient", "LLMError", "LLMTimeout", "parse_endpoint"]
