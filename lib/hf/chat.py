"""Chat templates: turning a list of ``{"role", "content"}`` messages into the model's prompt text."""
from __future__ import annotations

from icmlkit.lib.core.errors import UsageError

ROLES = ("system", "user", "assistant", "tool")


def has_chat_template(tokenizer) -> bool:
    """Whether ``tokenizer`` carries a chat template (``tokenizer.chat_template``)."""
    return bool(getattr(tokenizer, "chat_template", None))


def _check_messages(messages, where: str) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise UsageError(f"{where}: expected a non-empty list of messages")
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise UsageError(f"{where}, message {j + 1}: expected an object with 'role' and 'content'")
        if not isinstance(m["content"], str):
            raise UsageError(f"{where}, message {j + 1}: 'content' must be a string")
    return list(messages)


def apply_chat_template(tokenizer, messages: list[dict], *, add_generation_prompt: bool = True) -> str:
    """The prompt text of one conversation, rendered by the tokenizer's own chat template.

    ``add_generation_prompt`` appends the header of the assistant's turn, so that generation
    continues as the assistant. A tokenizer without a chat template (a base model, most encoders)
    raises :class:`UsageError`: give plain prompts instead.
    """
    if not has_chat_template(tokenizer):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise UsageError(f"the tokenizer of {name} has no chat template (it is probably not a chat model); "
                         "give plain prompt texts instead of messages")
    msgs = _check_messages(messages, "conversation")
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt)
    if not isinstance(text, str):  # some versions return a list for batched input
        text = text[0]
    return text


def chat_prompts(tokenizer, conversations: list[list[dict]], *, add_generation_prompt: bool = True) -> list[str]:
    """:func:`apply_chat_template` for each conversation, in order."""
    out = []
    for i, conv in enumerate(conversations):
        try:
            out.append(apply_chat_template(tokenizer, conv, add_generation_prompt=add_generation_prompt))
        except UsageError as exc:
            if has_chat_template(tokenizer):
                raise UsageError(f"conversation {i + 1}: {exc}") from None
            raise
    return out
