"""The demo: FuncAttn vs Transolver on the shipped Darcy data (train 16x16, test 16x16 and 32x32 zero-shot)
and the few-shot sine check, within the demo budget of 60 s of CPU time (200 training samples, 5 epochs,
300 few-shot steps; the benchmark trains for longer)."""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core import console
from icmlkit.lib.core.io import write_json, write_rows
from icmlkit.lib.train_operator.config import DarcyConfig, FewShotConfig, ModelConfig, TrainConfig

log = console.log


def darcy_files() -> dict | None:
    """The shipped Darcy files (data/darcy in the checkout), or None."""
    root = Path(__file__).resolve().parents[2] / "data" / "darcy"
    files = {k: root / f"darcy_{k}.pt" for k in ("train_16", "test_16", "test_32")}
    return files if all(p.is_file() for p in files.values()) else None


FEWSHOT_STEPS = 300


def run_demo(folder, *, seed: int = 0, device="cpu", epochs: int = 5) -> dict:
    from icmlkit.lib.train_operator.data import fieldset, read_fields
    from icmlkit.lib.train_operator.fewshot import few_shot
    from icmlkit.lib.train_operator.solvers import generate_darcy
    from icmlkit.lib.train_operator.train import plot_superres, superres, train

    folder = Path(folder)
    files = darcy_files()
    if files is not None:
        tr = read_fields(files["train_16"]).head(200)
        tests = [read_fields(files["test_16"]), read_fields(files["test_32"])]
        source = "data/darcy (neuraloperator 0.3.0)"
    else:  # generated: solved at 65 nodes, subsampled to 17 and 33
        log.info("data/darcy not found: generating Darcy data (solved at 65x65) ...")
        a = generate_darcy(DarcyConfig(n=250, solve_resolution=65, resolution=17), seed=seed).arrays
        b = generate_darcy(DarcyConfig(n=250, solve_resolution=65, resolution=33), seed=seed).arrays
        tr = fieldset(a["x"][:200], a["y"][:200], None)
        tests = [fieldset(a["x"][200:], a["y"][200:], None), fieldset(b["x"][200:], b["y"][200:], None)]
        source = "generated Darcy"
    out = {}
    for name in ("funcattn", "transolver"):
        log.info(f"training {name} ({epochs} epochs, {tr.n_samples} samples at {tr.resolution}) ...")
        res = train(ModelConfig(model=name), TrainConfig(epochs=epochs, batch=8, val_fraction=0), tr, tests[0],
                    seed=seed, device=device)
        res.model.save(folder / f"{name}.safetensors")
        write_rows(folder / f"{name}.epochs.csv", res.rows)
        sr = superres(res.model, tests, device=device)
        write_rows(folder / f"{name}.superres.csv", sr.rows)
        plot_superres(folder / f"{name}.superres.png", sr)
        out[name] = [r["rel_l2_x100"] for r in sr.rows]
    fs = few_shot(FewShotConfig(steps=FEWSHOT_STEPS, test_tasks=200), seed=seed, device=device).summary
    summary = {
        "headline": (f"{source}: FuncAttn rel L2 x100 {out['funcattn'][0]:.2f} at 16x16, {out['funcattn'][1]:.2f} "
                     f"zero-shot at 32x32 (Transolver {out['transolver'][0]:.2f} / {out['transolver'][1]:.2f}); "
                     f"few-shot sine MSE ratio FuncAttn/softmax {fs['ratio']:.3f} ({epochs} epochs, "
                     f"{FEWSHOT_STEPS} few-shot steps)"),
        "funcattn_16": out["funcattn"][0], "funcattn_32": out["funcattn"][1],
        "transolver_16": out["transolver"][0], "transolver_32": out["transolver"][1],
        "fewshot_ratio": fs["ratio"],
    }
    write_json(folder / "summary.json", summary)
    return summary
