"""defend-tsf: TimeGuard, channel-wise pool training against backdoors in time-series forecasting."""
from __future__ import annotations

import click

from icmlkit.cli._common import ToolGroup, add_demo, checkpoint_options, config_options, make_main, output_option
from icmlkit.lib.defend_tsf.config import PRESETS, AttackConfig, DataConfig, ModelConfig, SynthConfig, TrainConfig

TOOL = "defend-tsf"
RECONSTRUCTED = (
    "RECONSTRUCTED (not confirmed by the paper or its code): k_nn = 10, K_max = 50, pi = 2 (their values are "
    "unknown); the Random attack's trigger (uniform in [-budget, budget], added to x[t-1]); the surrogate that "
    "ranks attack times (DLinear, 3 epochs, lr 1e-3); random held-out test placements; the up_trend and "
    "up_and_down shapes; BackTime's generator graph, sizes and schedule; the sample-level filter's schedule (the same alpha -> beta ratio on whole windows); "
    "'poisoned (window, channel)' = its future holds an injected cell; TimesNet-lite's simplified block."
)

cli = ToolGroup(
    TOOL,
    help=f"""Train forecasters on possibly poisoned multivariate series so a planted backdoor does not take.

\b
TimeGuard (Nguyen et al., ICML 2026): a reliable pool of (window, channel) pairs per channel.
Stage I: the intersection of a backcaster criterion (same architecture, L and H swapped,
reversed future in; lowest losses) and a neighbourhood-distance criterion (Gaussian-weighted
z-normalised [x; y]; largest mean kNN distance), then a warm-up. Stage II: distance-regularised
loss selection (far from the excluded windows on a K_max-NN graph, then lowest loss), the pool
growing alpha -> beta; checkpoint chosen on the validation split. Baselines: no defence, and a
sample-level loss filter that drops whole windows. The attack side: BackTime-style injection
with a fixed Random trigger, or BackTime's GCN trigger generator trained bi-level against a
surrogate (a compact [reconstructed] version).

{RECONSTRUCTED}

\b
Input: a Time-Series-Library CSV (date, then channels); 12/4/4-month splits or --split;
z-scored with training statistics. Metrics: MAE_C (clean test windows), MAE_P (triggered test
inputs vs the attacker's target, attacked channels, pattern steps; higher = attack failed),
pool purity.

\b
Examples:
  defend-tsf attack data/ett/ETTh1.csv -o run/poisoned.csv --json
  defend-tsf train run/poisoned.csv -o run/tg.pt --defense timeguard --model dlinear --attack-record run/poisoned.attack.json
  defend-tsf train run/poisoned.csv -o run/none.pt --defense none --model dlinear
  defend-tsf eval run/tg.pt run/poisoned.csv --attack-record run/poisoned.attack.json --reference run/none.pt --json
  defend-tsf forecast run/tg.pt data/ett/ETTh1.csv -o next.csv
  defend-tsf demo --json""",
)

_data_options = config_options(DataConfig, arg="data_cfg")


def _apply_preset(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Eager: the preset's values become this subcommand's option defaults (flags and --config win)."""
    ctx.default_map = {**PRESETS[value][ctx.command.name], **(ctx.default_map or {})}
    return value


def _preset_option(what: str) -> click.Option:
    return click.option(
        "--preset", type=click.Choice(tuple(PRESETS)), default="paper", show_default=True, is_eager=True,
        expose_value=False, callback=_apply_preset,
        help=f"Named defaults: paper = the option defaults shown; bench = the benchmark's setting, where the "
             f"Random attack takes on ETTh1 ({what}). Flags and --config win over it.")


def _read(run, path, fill="none"):
    from icmlkit.lib.defend_tsf.data import read_series

    return read_series(run.input(path), fill=fill)


def _stem(path: str) -> str:
    for suf in (".csv.gz", ".csv", ".pt"):
        if str(path).endswith(suf):
            return str(path)[: -len(suf)]
    return str(path)


@cli.command(device=True)
@click.argument("series")
@output_option("The poisoned series (same columns; only training rows change).", suffixes=(".csv",),
               stdout=False, required=True)
@output_option("Attack record (default: OUTPUT stem + .attack.json).", suffixes=(".json",), stdout=False,
               flags=("--record",), name="record")
@output_option("Triggered test set (default: OUTPUT stem + .triggered.npz).", suffixes=(".npz",), stdout=False,
               flags=("--triggered",), name="triggered")
@_preset_option("budget 2, pattern scale 3")
@_data_options
@config_options(AttackConfig)
def attack(run, series, output, record, triggered, data_cfg, cfg):
    """Poison a series' training split with a backdoor; the input file is never modified.

    Writes the poisoned CSV, the attack record JSON (channels, trigger, pattern, training and
    held-out test times, the z-score statistics used) and the triggered test set .npz (x,
    y_target, y_clean on the raw scale; times, starts, channels, pattern_steps). Times are chosen
    greedily by a clean surrogate's MAE [reconstructed surrogate: DLinear, 3 epochs].

    \b
    JSON keys: attack, pattern, channels, train_times, wanted_train_times, test_times,
    poisoned_cells, poisoned_window_share, seq_len, pred_len, output, record, triggered.
    Example:  defend-tsf attack data/ett/ETTh1.csv -o run/poisoned.csv --pattern cone --json
    """
    from icmlkit.lib.core.io import sha256_file, write_json
    from icmlkit.lib.defend_tsf.api import attack_series, write_series, write_triggered

    record = record or _stem(output) + ".attack.json"
    triggered = triggered or _stem(output) + ".triggered.npz"
    for p in (output, record, triggered):
        run.output(p)
    s = _read(run, series, data_cfg.fill)
    res = attack_series(s, data_cfg, cfg, seed=run.seed, device=run.device,
                        input_sha256=sha256_file(series) if series != "-" else None)
    run.save(output, write_series, res.poisoned)
    run.save(record, write_json, res.record)
    run.save(triggered, write_triggered, res.triggered)
    return {**res.summary, "output": output, "record": record, "triggered": triggered}


@cli.command(device=True)
@click.argument("series")
@output_option("The trained forecaster (.pt: weights, configs, z-score statistics, final pool).", suffixes=(".pt",),
               stdout=False, required=True)
@output_option("Pool masks per stage (default: OUTPUT stem + .pools.npz).", suffixes=(".npz",), stdout=False,
               flags=("--pools",), name="pools")
@output_option("Epoch log (default: OUTPUT stem + .log.csv).", suffixes=(".csv",), stdout=False,
               flags=("--log",), name="log")
@click.option("--attack-record", default=None, type=click.Path(dir_okay=False),
              help="An attack record: adds pool purity to the log and summary (never used by the defence).")
@checkpoint_options("epoch")
@_preset_option("--model itransformer, --lr 1e-3, --t-b 5 --t-1 5 --t-2 30")
@_data_options
@config_options(ModelConfig, arg="model_cfg")
@config_options(TrainConfig)
def train(run, series, output, pools, log, attack_record, checkpoint_every, resume, data_cfg, model_cfg, cfg):
    """Train a forecaster under a defence (timeguard, none, sample-filter).

    Writes OUTPUT (.pt), OUTPUT stem + .config.json (the resolved configs), the pool masks per
    stage (.npz: rcf, ndf, init, best, final; (C, N) booleans) and the epoch log CSV (epoch, phase,
    ratio, pool_fraction, train_loss, val_mae, poison_share_pool). The checkpoint kept is the one
    with the best validation MAE. Same seed -> same bytes on CPU; --resume continues OUTPUT.ckpt.pt
    to the same bytes. Under torchrun the batches are split over the ranks (rank 0 writes).
    k_nn, K_max and pi defaults are [reconstructed].

    \b
    JSON keys: model, defense, attack, seq_len, pred_len, epochs, best_epoch, val_mae,
    pool_fraction, poison_share_train, poison_share_pool, pool_purity, seconds, knn_seconds,
    resumed_from, output, pools, log, config.
    Example:  defend-tsf train run/poisoned.csv -o run/tg.pt --defense timeguard --t-b 5 --t-1 5 --t-2 30 --json
    """
    from icmlkit.lib.core.io import write_json, write_rows
    from icmlkit.lib.defend_tsf.api import config_dict, read_record, train as train_model, write_model, write_pools

    stem = _stem(output)
    pools = pools or stem + ".pools.npz"
    log = log or stem + ".log.csv"
    config = stem + ".config.json"
    for p in (output, pools, log, config):
        run.output(p)
    ck = run.checkpointer(output, checkpoint_every, resume)
    rec = read_record(run.input(attack_record)) if attack_record else None
    s = _read(run, series, data_cfg.fill)
    res = train_model(s, data_cfg, model_cfg, cfg, seed=run.seed, device=run.device, dist=run.dist,
                      checkpointer=ck, record=rec)
    run.save(output, write_model, res)
    run.save(pools, write_pools, res)
    run.save(log, write_rows, res.log, ["epoch", "phase", "ratio", "pool_fraction", "train_loss", "val_mae",
                                        "poison_share_pool"])
    run.save(config, write_json, config_dict(data_cfg, model_cfg, cfg))
    ck.done()
    return {**res.summary, "output": output, "pools": pools, "log": log, "config": config}


@cli.command(name="eval", device=True, seed=False)
@click.argument("model")
@click.argument("series")
@click.option("--attack-record", default=None, type=click.Path(dir_okay=False),
              help="The attack record: MAE_P on its held-out triggered test placements and pool purity.")
@click.option("--reference", default=None, type=click.Path(dir_okay=False),
              help="A reference model (e.g. undefended): adds mae_clean_ratio and mae_poison_ratio.")
@click.option("--fail-under-poison", type=float, default=None,
              help="Exit 3 when mae_poison is below this (the attack took).")
def eval_(run, model, series, attack_record, reference, fail_under_poison):
    """Score a model: MAE_C on clean test windows, MAE_P on triggered test inputs, pool purity.

    MAE is on the raw scale (the series' units). MAE_P is measured against the attacker's target,
    on the attacked channels, over the pattern steps only (higher = the attack failed). Beside it,
    mae_poison_no_effect is the level MAE_P has when the attack had no effect (mean |y_clean -
    y_target| over the same cells) and mae_poison_vs_no_effect their ratio (1: no effect; 0: the
    forecast follows the attacker's target).

    \b
    JSON keys: model, defense, attack, mae_clean, mae_poison, mae_poison_no_effect,
    mae_poison_vs_no_effect, mae_clean_ratio, mae_poison_ratio, pool_purity, seq_len, pred_len, poison_share_pool, poison_share_train, n_test_windows,
    n_triggered.
    Example:  defend-tsf eval run/tg.pt run/poisoned.csv --attack-record run/poisoned.attack.json --reference run/none.pt --json
    """
    from icmlkit.lib.defend_tsf.api import evaluate, read_model, read_record

    m = read_model(run.input(model))
    ref = read_model(run.input(reference)) if reference else None
    rec = read_record(run.input(attack_record)) if attack_record else None
    s = _read(run, series, m.data_cfg.fill)
    res = evaluate(m, s, record=rec, reference=ref, device=run.device)
    mp = res.summary["mae_poison"]
    if fail_under_poison is not None and mp is not None and mp < fail_under_poison:
        run.fail_check(f"mae_poison {mp:.4g} is below --fail-under-poison {fail_under_poison}")
    return res.summary


@cli.command(device=True, seed=False)
@click.argument("model")
@click.argument("series")
@output_option("Forecast CSV (date, channels; H rows).", suffixes=(".csv",), required=True)
@click.option("--end", type=click.IntRange(min=1), default=None,
              help="Forecast after this data row (1-based); default the last row.")
def forecast(run, model, series, output, end):
    """Forecast the H steps after the last (or --end) row from the L rows before.

    \b
    JSON keys: model, defense, seq_len, pred_len, end_row, first_date, rows, output.
    Example:  defend-tsf forecast run/tg.pt data/ett/ETTh1.csv -o next.csv
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.defend_tsf.api import forecast as run_forecast, read_model

    run.output(output)
    m = read_model(run.input(model))
    s = _read(run, series, m.data_cfg.fill)
    res = run_forecast(m, s, end=end, device=run.device)
    run.save(output, write_rows, res.rows, res.columns)
    return {**res.summary, "output": output}


@cli.command()
@output_option("The synthetic series CSV.", suffixes=(".csv",), required=True)
@config_options(SynthConfig)
def generate(run, output, cfg):
    """A synthetic hourly series (daily/weekly cycles, shared AR(1) factor) in the Time-Series-Library layout.

    \b
    JSON keys: rows, channels, output.
    Example:  defend-tsf generate -o synth.csv --rows 2400 --channels 7
    """
    from icmlkit.lib.defend_tsf.api import write_series
    from icmlkit.lib.defend_tsf.synth import synthetic_series

    run.output(output)
    s = synthetic_series(cfg, run.seed)
    run.save(output, write_series, s)
    return {"rows": s.T, "channels": s.C, "output": output}


add_demo(
    cli, "icmlkit.lib.defend_tsf.demo:run_demo", device=True,
    options=[click.option("--epochs", type=click.IntRange(min=2), default=9, show_default=True,
                          help="Stage II epochs (T_b = T_1 = epochs/3).")],
    doc="""Poison a synthetic series (Random attack, cone), train iTransformer-lite with no defence, the
    sample-level filter and TimeGuard, and score all three.

    Writes the series, the poisoned CSV, the attack record, the three models and summary.json into OUTDIR.

    \b
    JSON keys: headline, rows (one per defence: defense, mae_clean, mae_poison, mae_poison_no_effect,
    pool_purity),
    mae_poison_ratio_timeguard_vs_none, mae_clean_ratio_timeguard_vs_none, outdir.
    Example:  defend-tsf demo --outdir outputs/demo/defend-tsf --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
