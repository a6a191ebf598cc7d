"""The demo of steer-concept: switch horses -> motorcycles in the real MiniLM-L6 encoder.

Bundled texts (data/concepts): 150 COCO captions, put into question frames to match the concept
questions' form (:func:`.data.neutral_texts`, the default since issue 58), give the neutral
statistics (every token), 80 horse
and 80 motorcycle questions the concept means and the probes; 25 + 25 held-out questions, 30
held-out captions and 20 helpfulness texts (the unrelated concept) are scored (sizes that keep the
demo within its 60-s CPU budget; the benchmark scores the full sets). CASteer,
LEACE-Switch and MidSteer are hooked at the attention output of all six layers (the official LLM
setting) and swept over strengths; LEACE erases the pair at the attention output of layer 3 alone,
where its guarantee is checked by a re-trained probe.
"""
from __future__ import annotations

from pathlib import Path

from icmlkit.lib.core.io import write_json
from icmlkit.lib.steer_concept.data import load_bundled, neutral_texts
from icmlkit.lib.steer_concept.evaluate import evaluate_grid, matched_disturbance, pareto_plot, write_table
from icmlkit.lib.steer_concept.hooks import Encoder
from icmlkit.lib.steer_concept.model import load_model
from icmlkit.lib.steer_concept.pipeline import fit_steerings

GRID = {"CASteer": [0.5, 1.0, 2.0], "LEACE-Switch": [1.0, 1.5, 2.0], "MidSteer": [0.5, 1.0, 1.5], "LEACE": [1.0]}
MAX_LENGTH = 48


def run_demo(folder: Path, *, seed: int = 0, device="cpu") -> dict:
    folder = Path(folder)
    data = load_bundled()
    loaded = load_model("minilm", device=device)
    h, m = data["horses"], data["motorcycles"]
    # the neutral set in the prompts' form (the concept texts are questions: the captions as questions)
    neutral, form = neutral_texts(data["neutral"][:150], h[:80])
    steerings, info = fit_steerings(loaded, layers="all", site="attn", neutral=neutral, source=h[:80],
                                    target=m[:80], method_layers={"leace": [3]}, concept="horses->motorcycles",
                                    device=device, max_length=MAX_LENGTH)
    for label, st in steerings:
        st.save(folder / f"{label.lower()}.safetensors")
    enc = Encoder(loaded, layers="all", site="attn", pool="mean", device=device, max_length=MAX_LENGTH)
    rows = evaluate_grid(enc, steerings, GRID, source_train=h[:80], target_train=m[:80], source_test=h[110:135],
                         target_test=m[110:135], neutral=data["neutral"][340:370], unrelated=data["helpfulness"][:20],
                         probe_layer=3, train_embeddings=(info.pop("source"), info.pop("target")), erasure_train=80,
                         seed=seed)
    write_table(folder / "table.csv", rows)
    plotted = pareto_plot(folder / "pareto.png", rows, title="MiniLM-L6, horses -> motorcycles, attention output "
                          "of all layers (demo data)")
    matched = {lab: {"neutral": matched_disturbance(rows, lab, "disturbance_neutral"),
                     "unrelated": matched_disturbance(rows, lab, "disturbance_unrelated")}
               for lab in ("CASteer", "LEACE-Switch", "MidSteer")}
    leace = next(r for r in rows if r["label"] == "LEACE")

    def fmt(v):
        return "n/a" if v is None else f"{v:.1e}"

    headline = ("disturbance at switch 0.9 (neutral / unrelated): "
                + ", ".join(f"{k} {fmt(v['neutral'])} / {fmt(v['unrelated'])}" for k, v in matched.items())
                + f"; LEACE probe acc {leace['probe_acc_after_erasure']:.2f}")
    info["neutral_form"] = form
    summary = {"headline": headline, "matched_disturbance_at_switch_0.9": matched,
               "leace_probe_acc_after_erasure": leace["probe_acc_after_erasure"], "fit": info,
               "plot": plotted}
    write_json(folder / "summary.json", {**summary, "rows": rows})
    return {**summary, "files": sorted(p.name for p in folder.iterdir())}
