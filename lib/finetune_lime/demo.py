"""The demo: a toy backbone, four conflicting tasks, LiME-LoRA vs LoRA (r = 2) at equal steps."""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.io import write_json, write_safetensors


PRETRAIN_STEPS = 200  # with 2 x 100 fine-tuning steps, within the demo budget of 60 s of CPU time


def run_demo(folder: Path, *, seed: int = 0, device=None, steps: int = 100) -> dict:
    from icmlkit.lib.hf.models import load_causal_lm
    from icmlkit.lib.finetune_lime.config import AdapterConfig, EvalConfig, TasksConfig, ToyConfig, TrainConfig
    from icmlkit.lib.finetune_lime.data import make_tasks, write_task_rows
    from icmlkit.lib.finetune_lime.toy import pretrain_toy, save_toy
    from icmlkit.lib.finetune_lime.train import evaluate, train

    folder = Path(folder)
    toy = pretrain_toy(ToyConfig(steps=PRETRAIN_STEPS, layers=2), seed=seed, device=device)
    save_toy(folder / "toy", toy)
    tasks = TasksConfig(tasks=["sort_asc", "sort_desc", "caesar1", "caesar_m1"], n_per_task=150, min_len=3, max_len=4)
    rows = make_tasks(tasks, seed=seed)
    test = make_tasks(TasksConfig(tasks=tasks.tasks, n_per_task=25, min_len=3, max_len=4), seed=seed + 1000)
    write_task_rows(folder / "tasks.jsonl", rows)
    out = []
    for method, rank in (("lime-lora", 2), ("lora", 2)):
        loaded = load_causal_lm(str(folder / "toy"), device=device)
        res = train(TrainConfig(steps=steps, batch_size=16, moe_lr=5e-3, peft_lr=5e-3), AdapterConfig(method=method,
                    rank=rank), loaded, rows, seed=seed, device=device, model_spec="toy")
        write_safetensors(folder / f"{method}.safetensors", res.tensors, res.metadata)
        ev = evaluate(EvalConfig(), res.adapted, loaded.tokenizer, test)
        out.append({"method": method, "trainable_params": res.summary["trainable_params"],
                    "router_params": res.summary["router_params"], "exact_match": ev.summary["exact_match"],
                    "routing_nmi": ev.summary["routing_nmi"], "per_task": ev.summary["per_task"]})
    summary = {"headline": f"exact match LiME-LoRA {out[0]['exact_match']:.3f} vs LoRA(r=2) {out[1]['exact_match']:.3f} "
                           f"after {steps} steps on 4 conflicting toy tasks", "rows": out}
    write_json(folder / "summary.json", summary)
    return summary
