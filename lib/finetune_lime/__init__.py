"""LiME (Kowsher et al., ICML 2026): mixture-of-experts fine-tuning with one shared PEFT module
modulated by expert vectors and zero-parameter routing, with the MoE-PEFT baselines.

- :mod:`.config`: option dataclasses (torch-free; the CLI's options are declared from them);
- :mod:`.layers`: LiME-LoRA / -DoRA / -LoRA-FA / -SliceFine layers, LoRA, MoLoRA, HydraLoRA, the
  routing pieces (normaliser, n-gram source, soft / Auto / hard / sparse selection, balance terms);
- :mod:`.adapter`: our own module swap by target suffix, the pad-mask hook, lime-prompt, counts,
  optimiser groups, adapter files;
- :mod:`.data`: task rows (JSONL / CSV), conflicting synthetic tasks, the toy tokenizer;
- :mod:`.train`: train / evaluate / generate / routing statistics / count; :mod:`.toy`: pretrain-toy;
  :mod:`.digits`: the scikit-learn digits multi-label check; :mod:`.demo`: the demo;
- :mod:`.peft_io`: peft LoRA folders out (lora exactly, LiME's shared B·A part only: LiME cannot be
  merged) and in (a peft LoRA as our lora baseline).
"""
from icmlkit.lib.core.lazy import lazy_exports

_LAZY = {
    "AdapterConfig": "icmlkit.lib.finetune_lime.config", "TrainConfig": "icmlkit.lib.finetune_lime.config",
    "EvalConfig": "icmlkit.lib.finetune_lime.config", "ToyConfig": "icmlkit.lib.finetune_lime.config",
    "TasksConfig": "icmlkit.lib.finetune_lime.config", "METHODS": "icmlkit.lib.finetune_lime.config",
    "apply_adapter": "icmlkit.lib.finetune_lime.adapter", "load_adapted": "icmlkit.lib.finetune_lime.adapter",
    "read_adapter": "icmlkit.lib.finetune_lime.adapter", "count_parts": "icmlkit.lib.finetune_lime.adapter",
    "read_rows": "icmlkit.lib.finetune_lime.data", "make_tasks": "icmlkit.lib.finetune_lime.data",
    "write_task_rows": "icmlkit.lib.finetune_lime.data",
    "train_adapter": "icmlkit.lib.finetune_lime.train", "evaluate": "icmlkit.lib.finetune_lime.train", "generate": "icmlkit.lib.finetune_lime.train",
    "routing_stats": "icmlkit.lib.finetune_lime.train", "count": "icmlkit.lib.finetune_lime.train", "nmi": "icmlkit.lib.finetune_lime.train",
    "load_backbone": "icmlkit.lib.finetune_lime.api", "routing_report": "icmlkit.lib.finetune_lime.api",
    "pretrain_toy": "icmlkit.lib.finetune_lime.toy", "save_toy": "icmlkit.lib.finetune_lime.toy",
    "export_peft": "icmlkit.lib.finetune_lime.peft_io", "save_peft": "icmlkit.lib.finetune_lime.peft_io",
    "read_peft": "icmlkit.lib.finetune_lime.peft_io", "load_peft": "icmlkit.lib.finetune_lime.peft_io",
    "import_peft": "icmlkit.lib.finetune_lime.peft_io",
}

__getattr__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
