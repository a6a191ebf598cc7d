"""Local Hugging Face models shared by the tools: offline loading, forward hooks, chat, generation, scoring.

- :mod:`.models`: :func:`load_model` / :func:`load_encoder` / :func:`load_causal_lm` for a local
  folder, a ``.gguf`` file, ``minilm`` (the packaged all-MiniLM-L6-v2 encoder) or ``smollm2`` (the
  packaged SmolLM2-135M-Instruct decoder, dequantised once from GGUF and cached as safetensors),
  ``qwen2.5-coder-1.5b-instruct`` / ``gemma-3-270m`` (GGUF files split over PyPI part wheels, the
  ``hf-large`` extra: joined, sha256-checked, cached as bfloat16 safetensors); never downloads anything.
- :mod:`.hooks`: :func:`find_layers`, :func:`parse_layers`, :func:`site_modules` (attn / mlp / block
  sites or a module path), :func:`capture_outputs`, :func:`replace_outputs`, :func:`forward_hooks`.
- :mod:`.chat`: :func:`apply_chat_template`, :func:`chat_prompts` (clear error without a template).
- :mod:`.generate`: :func:`greedy_generate` (left-padded batches, deterministic) and
  :func:`score_continuations` (per-token log-probabilities, sum and mean, one pass per batch).

Importing this package does not import torch or transformers; the functions do, when called.
"""
from icmlkit.lib.hf.chat import apply_chat_template, chat_prompts, has_chat_template
from icmlkit.lib.hf.generate import Generation, Score, greedy_generate, score_continuations, token_logprobs
from icmlkit.lib.hf.hooks import (capture_outputs, find_layers, forward_hooks, output_tensor, parse_layers,
                                  replace_outputs, site_modules, with_output)
from icmlkit.lib.hf.models import (MODEL_NAMES, PART_MODELS, LoadedModel, PartModel, assemble_parts, cache_gguf,
                                   cache_part_model, cache_root, load_causal_lm, load_encoder, load_model, minilm_path,
                                   part_files, resolve_model_path, smollm2_gguf)

__all__ = ["MODEL_NAMES", "PART_MODELS", "Generation", "LoadedModel", "PartModel", "Score", "apply_chat_template",
           "assemble_parts", "cache_gguf", "cache_part_model", "cache_root", "part_files",
           "capture_outputs", "chat_prompts", "find_layers", "forward_hooks", "greedy_generate", "has_chat_template",
           "load_causal_lm", "load_encoder", "load_model", "minilm_path", "output_tensor", "parse_layers",
           "replace_outputs", "resolve_model_path", "score_continuations", "site_modules", "smollm2_gguf",
           "token_logprobs", "with_output"]
