"""Loading the frozen backbone and the routing report (the pieces the CLI needs besides train.py)."""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.io import write_rows


def load_backbone(spec, device=None):
    """A local Hugging Face causal-LM folder, a .gguf file, or ``smollm2`` (the packaged
    SmolLM2-135M-Instruct), loaded offline through lib/hf in float32."""
    from icmlkit.lib.hf.models import load_causal_lm

    return load_causal_lm(str(spec), device=device)


@dataclass
class RoutingReport:
    rows: list
    stats: dict
    summary: dict


def routing_report(ad, tok, rows, *, batch_size: int = 32) -> RoutingReport:
    """Expert use per task (rows task, expert, fraction), NMI task vs top expert, per layer."""
    from icmlkit.lib.core.errors import UsageError
    from icmlkit.lib.finetune_lime.train import routing_stats

    st = routing_stats(ad, tok, rows, batch_size=batch_size)
    if st is None:
        raise UsageError("plain lora has no routing; use a LiME, MoLoRA or HydraLoRA adapter")
    out = [{"task": t, "expert": e, "fraction": f} for t, u in st["usage"].items() for e, f in enumerate(u)]
    top = {t: int(max(range(len(u)), key=lambda e: u[e])) for t, u in st["usage"].items()}
    summary = {"method": ad.cfg.method, "n": len(rows), "experts": st["experts"], "routing_nmi": st["nmi_token"],
               "routing_nmi_max": st["nmi_token_max"], "routing_nmi_seq": st["nmi_seq"], "top_expert": top,
               "layers": st["layers"]}
    return RoutingReport(rows=out, stats=st, summary=summary)


def write_routing_png(path, st: dict) -> None:
    """Heat map task x expert of the usage fractions."""
    import numpy as np

    from icmlkit.lib.core.plot import pyplot, save_png

    plt = pyplot()
    tasks = st["tasks"]
    M = np.array([st["usage"][t] for t in tasks])
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * M.shape[1], 1.0 + 0.4 * len(tasks)))
    im = ax.imshow(M, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(M.shape[1]))
    ax.set_yticks(range(len(tasks)))
    ax.set_yticklabels(tasks)
    ax.set_xlabel("expert")
    ax.set_title(f"argmax expert use (NMI {st['nmi_token']:.2f})")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    save_png(fig, path)


def write_usage(path, rows) -> None:
    write_rows(path, rows, ["task", "expert", "fraction"])
