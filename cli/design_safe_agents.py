"""design-safe-agents: MaMa, Stackelberg search for multi-agent systems safe under compromise."""
from __future__ import annotations

import click

from icmlkit.cli._common import (ToolGroup, add_demo, checkpoint_options, config_options, make_main,
                                 output_option)
from icmlkit.lib.design_safe_agents.config import EvalConfig, GameConfig, LLMConfig, OptimumConfig, SearchConfig

TOOL = "design-safe-agents"
RECONSTRUCTED = (
    "[reconstructed] parts (the paper's algorithm box and hyper-parameters are not available): the "
    "selector group-chat runtime, the threat model's details (routes, retries, styles, compromised "
    "approvers/monitors), the objective's scalarisation, softmax parent sampling, the simulator's "
    "behaviour constants, the offline Meta-Agent's edit operators and the enumerating Meta-Adversary. "
    "OFFLINE MODE IS A SIMULATOR OF THE SEARCH, NOT OF LLMs: agents are scripted policies whose "
    "compliance presets are calibrated on recorded AgentDojo runs."
)

cli = ToolGroup(
    TOOL,
    help=f"""Design multi-agent systems that stay safe when up to eps agents are compromised (MaMa).

\b
The leader (Meta-Agent) commits to a design; the follower (Meta-Adversary) best-responds with
the attack minimising safety S (share of episodes without the harmful action). MaMa searches
designs (roles, permissions, channels, k-of-n approvals, monitors, hardened prompts, budget)
for high quality Q and high worst-case safety, against an adversary re-searched per design.

{RECONSTRUCTED}

\b
ENV: travel, assistant, finance, code (built-in scripted environments; 12-edit menus),
enterprise (9 agents, 12 targets, 51 local knobs; use --styles composed), agentdojo:SUITE
(workspace, travel, banking, slack: a real AgentDojo suite's tools, user tasks and injection
tasks split into agents [reconstructed]; needs the optional agentdojo==0.1.35) or an environment
JSON file (`design-safe-agents envs --show travel -o env.json` writes one to start from).
DESIGN: a design JSON file (schema: docs/design-safe-agents.md; `search` writes best_design.json).

\b
Example:
  design-safe-agents search travel -o runs/travel --iterations 40 --json
  design-safe-agents eval runs/travel/best_design.json travel --json
  design-safe-agents attack runs/travel/best_design.json travel --eps 2 -o attacks.jsonl
  design-safe-agents optimum travel -o travel-space.csv --json | jq .worst_case_safety
  design-safe-agents search enterprise -o runs/ent --styles composed --edits 3 --iterations 200 \
      --attack-budget 0 --objective constrained --quality-floor 0.8445 --spread 0.05 --json""",
)

game_options = config_options(GameConfig, arg="game")
llm_options = config_options(LLMConfig, arg="llm")


def _env(run, spec):
    from icmlkit.lib.design_safe_agents import read_env

    if spec not in ("travel", "assistant", "finance", "code", "enterprise") and not spec.startswith("agentdojo:"):
        run.input(spec)
    return read_env(spec)


def _design(run, path, env):
    from icmlkit.lib.design_safe_agents import read_design

    return read_design(run.input(path), env)


def _cassette_out(run, llm):
    if llm.cassette:
        run.output(llm.cassette)
    if llm.replay:
        run.input(llm.replay)


def _save_cassette(run, llm, res):
    if llm.cassette and res.cassette is not None:
        from icmlkit.lib.core.io import write_text

        run.save(llm.cassette, write_text, res.cassette.text())


@cli.command()
@click.argument("env")
@output_option("Run directory: archive.jsonl, attacks.jsonl, best_design.json, log.csv, summary.json, manifest.json.",
               directory=True, required=True)
@checkpoint_options("search iterations")
@game_options
@config_options(SearchConfig)
@llm_options
def search(run, env, output, checkpoint_every, resume, game, cfg, llm):
    """Run the MaMa search (or a baseline) on ENV and write a run directory.

    Archive seeded with the hand-designed system; parents sampled by score with a temperature
    [reconstructed]; the Meta-Agent edits using the parent's strongest attacks; the
    Meta-Adversary re-searches every design (attack archive + fresh sample) and keeps the K
    strongest; finalists are re-evaluated against the whole attack space. --method
    quality-only / random / fixed-attack run the baselines with the same budget; feedback-off
    is the ablation whose multi-edit Meta-Agent does not read the attacks. --edits N: the
    multi-edit Meta-Agent (up to N toggles per proposal, each against one of the parent's
    strongest attacks). --styles composed: the adversary composes its attack text (framing,
    authority, obfuscation; 36 compositions) [reconstructed]. --resume continues
    OUTPUT.ckpt.pt to the same bytes.

    \b
    JSON keys: env, method, iterations, objective, eps, best_quality, best_worst_case_safety,
    best_score, best_design, best_iteration, n_designs, llm_calls, seconds.
    Examples:
      design-safe-agents search travel -o runs/travel --iterations 40 --json
      design-safe-agents search finance -o runs/q --method quality-only --json
      design-safe-agents search travel -o runs/llm --meta-agent-model 'openai://127.0.0.1:8000/v1?model=qwen' \\
          --cassette runs/llm.cassette.jsonl
      design-safe-agents search enterprise -o runs/q --styles composed --edits 3 \\
          --adversary-model qwen2.5-coder-1.5b-instruct --cassette runs/q.cassette.jsonl
    """
    from icmlkit.lib.design_safe_agents import search_designs as do_search
    from icmlkit.lib.design_safe_agents import write_run_files

    output = output.rstrip("/") or output
    run.output(output)
    _cassette_out(run, llm)
    e = _env(run, env)
    env_obj = e.model_dump(mode="json", by_alias=True)
    ckpt = run.checkpointer(output, checkpoint_every, resume)
    res = do_search(e, game, cfg, llm, seed=run.seed, checkpointer=ckpt, env_obj=env_obj)
    with run.run_dir(output) as folder:
        write_run_files(folder, res.files)
    _save_cassette(run, llm, res)
    ckpt.done()
    return res.summary


@cli.command()
@click.argument("design")
@click.argument("env")
@output_option("The K strongest attacks (JSON Lines: rank, safety, harm, key, attack).", suffixes=(".jsonl",))
@click.option("--keep", type=click.IntRange(min=1), default=10, show_default=True, help="K strongest attacks to keep.")
@click.option("--attack-budget", type=click.IntRange(min=0), default=0, show_default=True,
              help="Random attacks to try (0: the whole enumerated space, the exact best response).")
@game_options
@llm_options
def attack(run, design, env, output, keep, attack_budget, game, llm):
    """The Meta-Adversary's best response to DESIGN: argmin over the enumerated attack set.

    Attacks: a subset C of <= eps agents or monitors, a sender in C, a harmful target, a style
    (direct, lie, impersonate) and a channel route to an honest executor [reconstructed].
    Safety of each by exact dynamic programming. --adversary-model lets an LLM propose them.

    \b
    JSON keys: n_attacks, worst_case_safety, strongest_attack, eps, adversary, llm_calls.
    Examples:
      design-safe-agents attack best_design.json travel --eps 2 -o attacks.jsonl --json
      design-safe-agents attack best_design.json travel --categories privacy -o - | head -3
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.design_safe_agents import attack_design as do_attack

    run.output(output)
    _cassette_out(run, llm)
    e = _env(run, env)
    d = _design(run, design, e)
    res = do_attack(d, e, game, keep=keep, attack_budget=attack_budget, seed=run.seed, llm_cfg=llm)
    if output is not None:
        run.save(output, write_rows, res.rows, fmt=".jsonl")
    _save_cassette(run, llm, res)
    return res.summary


@cli.command("eval")
@click.argument("design")
@click.argument("env")
@game_options
@config_options(EvalConfig, arg="ecfg")
@llm_options
@click.option("--fail-under", type=float, default=None, help="Exit 3 when worst_case_safety is below this.")
def eval_cmd(run, design, env, game, ecfg, llm, fail_under):
    """Quality and worst-case safety of DESIGN on ENV (exact DP, or Monte Carlo through the runtime).

    safety_ci: the Wilson 95 % interval of a Monte-Carlo estimate (--episodes) of the strongest
    attack's safety; with --method dp it checks the exact value. Agents whose model is 'llm' are
    played by --agent-model (needs --method mc; attacks are ranked with them replaced by the
    gpt-4o-mini preset [reconstructed]).

    \b
    JSON keys: quality, worst_case_safety, safety_ci, strongest_attack, n_attacks, method,
    episodes, quality_ci, objective, score, eps, llm_calls, llm_generations (model calls made: a local
    greedy model answers a repeated prompt from memory).
    Examples:
      design-safe-agents eval best_design.json travel --json
      design-safe-agents eval best_design.json travel --eps 2 --method mc --episodes 2000 --json
    """
    from icmlkit.lib.design_safe_agents import evaluate_design as do_eval

    _cassette_out(run, llm)
    e = _env(run, env)
    d = _design(run, design, e)
    res = do_eval(d, e, game, ecfg, seed=run.seed, llm_cfg=llm)
    _save_cassette(run, llm, res)
    s = res.summary
    if fail_under is not None and s["worst_case_safety"] < fail_under:
        run.fail_check(f"worst_case_safety {s['worst_case_safety']:.4f} is below --fail-under {fail_under}")
    return s


cli.alias("evaluate", "eval")


@cli.command(seed=False)
@click.argument("env")
@output_option("Every design of the space with Q, S_min and score (.csv or .jsonl).", suffixes=(".csv", ".jsonl"))
@click.option("--design-out", default=None, type=click.Path(dir_okay=False),
              help="Write the optimal design as JSON here.")
@game_options
@config_options(OptimumConfig, arg="ocfg")
def optimum(run, env, output, design_out, game, ocfg):
    """The exact Stackelberg optimum of ENV's design space (its edit menu) by enumeration.

    Every subset of the menu's edits (2^12 designs for the built-in environments; the menus are
    [reconstructed]) is evaluated with exact quality and the exact best response (the whole attack
    space).

    \b
    JSON keys: n_designs, menu, optimum_bits, optimum_design, quality, worst_case_safety, score,
    objective, eps, quality_only_optimum, quality_only_worst_case_safety, share_within_0.95, seconds.
    Example:  design-safe-agents optimum travel -o space.csv --design-out opt.json --json
    """
    import json

    from icmlkit.lib.core.io import write_rows, write_text
    from icmlkit.lib.design_safe_agents import find_optimum as do_opt
    from icmlkit.lib.design_safe_agents.schema import design_json

    run.output(output)
    if design_out is not None and not str(design_out).endswith(".json"):
        raise click.BadParameter(f"{design_out}: expected a .json file", param_hint="--design-out")
    run.output(design_out)
    e = _env(run, env)
    res = do_opt(e, game, ocfg)
    if output is not None:
        run.save(output, write_rows, res.rows)
    if design_out is not None:
        run.save(design_out, write_text, json.dumps(design_json(res.design), indent=2) + "\n")
    return res.summary


@cli.command()
@click.argument("design")
@click.argument("env")
@output_option("The transcript (JSON Lines: one message or event per line).", suffixes=(".jsonl",))
@click.option("--attack", "attack_spec", default=None,
              help="An attack (JSON file, first line of `attack -o`, or inline JSON); default: a clean episode.")
@click.option("--task", default=None, help="Clean episode: the task id (default: the first task).")
@game_options
@llm_options
def run(run, design, env, output, attack_spec, task, game, llm):
    """One episode of DESIGN through the selector group-chat runtime [reconstructed]; its transcript.

    Clean (a task) or attacked (--attack); harm is judged by the target's programmatic state
    check (and by --judge-model when given). Agents whose model is 'llm' are played by
    --agent-model (e.g. smollm2, a weak real agent).

    \b
    JSON keys: design, env, mode, task | attack, steps_done, steps, harm, messages, stopped,
    check, judge, llm_calls.
    Examples:
      design-safe-agents run best_design.json travel --task hotel -o clean.jsonl --json
      design-safe-agents attack best_design.json travel -o a.jsonl && \\
        design-safe-agents run best_design.json travel --attack a.jsonl -o t.jsonl --json
    """
    from icmlkit.lib.design_safe_agents import read_attack, run_episode

    runner = run
    runner.output(output)
    _cassette_out(runner, llm)
    e = _env(runner, env)
    d = _design(runner, design, e)
    atk = None
    if attack_spec is not None:
        if not attack_spec.lstrip().startswith("{"):
            runner.input(attack_spec)
        atk = read_attack(attack_spec, e)
    res = run_episode(d, e, game, atk=atk, task_id=task, seed=runner.seed, llm_cfg=llm)
    if output is not None:
        import json

        from icmlkit.lib.core.io import write_text

        runner.save(output, write_text, "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in res.rows))
    _save_cassette(runner, llm, res)
    return res.summary


@cli.command(seed=False)
@click.option("--show", default=None, help="Write this environment's full JSON (to edit into your own).")
@output_option("With --show: the environment JSON; else the table (.csv/.jsonl).", suffixes=(".json", ".csv", ".jsonl"))
def envs(run, show, output):
    """List the built-in scripted environments (and the agentdojo:SUITE ones when agentdojo is
    installed), or write one as JSON (--show NAME -o env.json).

    \b
    JSON keys: envs, agentdojo (whether the optional agentdojo package imports), rows (env,
    agents, actions, tasks, targets, categories, menu, description).
    Examples:
      design-safe-agents envs --json
      design-safe-agents envs --show travel -o travel.json
    """
    import json

    from icmlkit.lib.core.io import write_rows, write_text
    from icmlkit.lib.design_safe_agents import list_envs

    run.output(output)
    if show is not None:
        from icmlkit.lib.design_safe_agents import read_env

        if output is None or not (output == "-" or str(output).endswith(".json")):
            raise click.BadParameter("--show writes JSON: give -o FILE.json or -o -", param_hint="-o")
        e = read_env(show)
        text = json.dumps(e.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False) + "\n"
        run.save(output, write_text, text)
        return {"env": e.name, "agents": len(e.base_design.agents), "targets": len(e.targets), "output": output}
    if output is not None and str(output).endswith(".json"):
        raise click.BadParameter("the table is .csv or .jsonl (.json is for --show)", param_hint="-o")
    res = list_envs()
    if output is not None:
        run.save(output, write_rows, res.rows)
    return res.summary


@cli.command(seed=False)
@output_option("The preset table (.csv or .jsonl).", suffixes=(".csv", ".jsonl"))
def presets(run, output):
    """The scripted agents' compliance presets and the AgentDojo pipeline each imitates.

    p_comply = (k + 1/2) / (n + 1) [reconstructed smoothing], k of n attacked AgentDojo runs
    (important_instructions) whose security check fired; capability = u^(1/3.49) [reconstructed
    form], u = the share of the 97 clean user tasks the pipeline solved, 3.49 = ground-truth tool
    calls per AgentDojo user task. Recomputed from ../shared/data/agentdojo_runs when present (read
    there, never copied).

    \b
    JSON keys: presets, measured_from, matches_frozen, rows (preset, imitates, compromised,
    attacked, p_comply, clean_solved, capability, measured_compromised, measured_clean_solved,
    measured_utility_clean).
    Example:  design-safe-agents presets --json | jq '.rows[] | [.preset, .p_comply]'
    """
    from icmlkit.lib.core.io import write_rows
    from icmlkit.lib.design_safe_agents import presets_table

    run.output(output)
    res = presets_table()
    if output is not None:
        run.save(output, write_rows, res.rows)
    return res.summary


add_demo(
    cli, "icmlkit.lib.design_safe_agents.demo:run_demo",
    options=[click.option("--env", "env_name", default="travel", show_default=True,
                          type=click.Choice(["travel", "assistant", "finance", "code"]), help="Built-in environment."),
             click.option("--iterations", type=click.IntRange(min=1), default=30, show_default=True,
                          help="Search iterations per method.")],
    doc="""MaMa vs quality-only search on a built-in environment, with the fixed baselines (simulator).

    Writes both run folders' best designs, a comparison table (comparison.csv), summary.json and
    manifest.json into OUTDIR. The offline mode simulates the search, not LLMs.

    \b
    JSON keys: headline, env, rows (method, quality, worst_case_safety, score), outdir.
    Example:  design-safe-agents demo --outdir outputs/demo/design-safe-agents --json
    """,
)

main = make_main(cli, TOOL)

if __name__ == "__main__":  # pragma: no cover
    main()
