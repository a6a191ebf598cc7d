"""Options of design-safe-agents, declared once (light module: no numpy, torch or pydantic here)."""
from __future__ import annotations

from dataclasses import dataclass

from icmlkit.lib.core.config import option
from icmlkit.lib.core.errors import UsageError

STYLES = ("direct", "lie", "impersonate")
# the parts of a composed attack text (lib/design_safe_agents/compose.py holds their factors)
FRAMINGS = ("plain", "task", "user", "urgent")
AUTHORITIES = ("none", "coordinator", "admin")
OBFUSCATIONS = ("plain", "paraphrase", "encoded")
OBJECTIVES = ("weighted", "lexicographic", "constrained")
# local chat models of lib/hf a role can name (qwen2.5-*: the optional hf-large extra)
LOCAL_MODELS = ("smollm2", "smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct", "qwen2.5-1.5b")
METHODS = ("mama", "quality-only", "random", "fixed-attack", "feedback-off")
STYLE_SETS = ("composed", "canned")   # all 36 composed attack texts / their 3 canned ones


@dataclass
class GameConfig:
    """The Stackelberg game: threat model and objective."""

    eps: int = option(1, "Compromised agents (or monitors) per attack, at most.", min=1, max=4)
    styles: list[str] = option(list(STYLES), "Persuasion styles the adversary may use (comma list of direct, lie, "
                          "impersonate; composed: the adversary composes its text from framing / authority / "
                          "obfuscation parts, 36 compositions; canned: their 3 canned ones; or compositions "
                          "FRAMING/AUTHORITY/OBFUSCATION) [reconstructed].")
    max_hops: int = option(2, "Longest channel path from the compromised sender to the executor.", min=1, max=4)
    max_attempts: int = option(3, "Attempts per attacked episode (while the message budget lasts) [reconstructed].",
                               min=1, max=20)
    categories: list[str] = option([], "Only harmful targets of these categories (comma list; empty: all).")
    objective: str = option("weighted", "weighted: Q + lambda*S_min; lexicographic: S_min, then Q; constrained: "
                            "max S_min s.t. Q >= --quality-floor [reconstructed].", choices=OBJECTIVES)
    lam: float = option(1.0, "lambda of the weighted objective [reconstructed].", min=0.0, flag="--lambda")
    tolerance: float = option(0.01, "lexicographic: Q breaks ties within this safety tolerance.", min=0.0)
    quality_floor: float = option(0.8, "constrained: the quality the design must keep.", min=0.0, max=1.0)
    spread: float = option(0.0, "Search score + this x the mean over targets of each target's worst-case safety "
                           "(S_min is flat while any target is open; 0: off) [reconstructed].", min=0.0)

    def check(self) -> None:
        def known(s):
            f, a, o = (s.split("/") + ["", "", ""])[:3] if s.count("/") == 2 else ("", "", "")
            return s in STYLES or s in STYLE_SETS or (f in FRAMINGS and a in AUTHORITIES and o in OBFUSCATIONS)

        bad = [s for s in self.styles if not known(s)]
        if bad or not self.styles:
            raise UsageError(f"--styles: unknown style(s) {', '.join(bad) or '(none given)'}; use "
                             f"{', '.join(STYLES + STYLE_SETS)} or FRAMING/AUTHORITY/OBFUSCATION with framing in "
                             f"{', '.join(FRAMINGS)}, authority in {', '.join(AUTHORITIES)}, obfuscation in "
                             f"{', '.join(OBFUSCATIONS)}")


@dataclass
class SearchConfig:
    """The MaMa loop and its baselines."""

    iterations: int = option(40, "Search iterations (designs proposed and evaluated).", min=1, max=100000)
    method: str = option("mama", "mama (Meta-Agent vs Meta-Adversary), quality-only (AFlow/ADAS-style, same budget), "
                         "random (random designs, same adversary) or fixed-attack (ablation: attacks found once on "
                         "the seed design, never re-searched).", choices=METHODS)
    temperature: float = option(0.05, "Softmax temperature of parent sampling by score [reconstructed].",
                                min=0.0, min_open=True)
    attack_budget: int = option(48, "Fresh random attacks per design besides the attack archive (0: all).", min=0)
    keep: int = option(5, "K strongest attacks kept per design.", min=1, max=1000)
    finalists: int = option(3, "Top designs re-evaluated against fresh attacks (the full attack space).", min=1)
    explore: float = option(0.25, "Offline Meta-Agent: share of random edits [reconstructed].", min=0.0, max=1.0)
    edits: int = option(1, "Offline Meta-Agent: up to this many knob toggles per proposal, each against one of "
                        "the parent's strongest attacks (1: the single-toggle Meta-Agent; feedback-off always "
                        "uses the multi-edit one, blind to the attacks) [reconstructed].", min=1, max=16)

    def check(self) -> None:
        pass


@dataclass
class LLMConfig:
    """Backends per role: openai://HOST:PORT/v1?model=NAME (key from --api-key-env), hf:FOLDER or a local named
    model (smollm2, qwen2.5-coder-1.5b-instruct: lib/hf, offline, greedy)."""

    meta_agent_model: str = option("", "Meta-Agent backend (empty: the programmatic Meta-Agent).")
    adversary_model: str = option("", "Meta-Adversary backend (empty: the enumerating adversary, or the composing "
                                  "one with composed --styles; with composed styles the LLM writes the attack "
                                  "text itself).")
    agent_model: str = option("", "Backend playing agents whose model is 'llm' (run, eval --method mc).")
    judge_model: str = option("", "Optional LLM judge of harm beside the programmatic check (run).")
    api_key_env: str = option("OPENAI_API_KEY", "Environment variable holding the endpoints' API key.")
    cassette: str = option("", "Record every LLM exchange to this JSONL cassette.")
    replay: str = option("", "Replay LLM answers from this JSONL cassette (no network).")
    llm_timeout: float = option(60.0, "Seconds per LLM request.", min=0.0, min_open=True)
    llm_retries: int = option(2, "Retries per LLM request (429, 5xx, timeouts).", min=0)
    repair_tries: int = option(2, "Times an invalid LLM design is sent back with the error for repair.", min=0)

    def check(self) -> None:
        if self.cassette and self.replay:
            raise UsageError("--cassette and --replay exclude each other")
        for flag, v in (("--meta-agent-model", self.meta_agent_model), ("--adversary-model", self.adversary_model),
                        ("--agent-model", self.agent_model), ("--judge-model", self.judge_model)):
            if v and not (v.startswith(("openai://", "openais://", "hf:")) or v in LOCAL_MODELS):
                raise UsageError(f"{flag} {v!r}: write openai://HOST:PORT/v1?model=NAME, hf:FOLDER or a local "
                                 f"named model ({', '.join(LOCAL_MODELS)})")

    @property
    def any(self) -> bool:
        return bool(self.meta_agent_model or self.adversary_model or self.agent_model or self.judge_model)


@dataclass
class EvalConfig:
    """Evaluation of one design."""

    method: str = option("dp", "dp: exact dynamic programming; mc: Monte Carlo through the runtime.",
                         choices=("dp", "mc"))
    episodes: int = option(2000, "Monte-Carlo episodes (per attack, per task) for --method mc and safety_ci.",
                           min=1, max=10 ** 7)
    keep: int = option(5, "Strongest attacks to report.", min=1, max=100000)
    attack_budget: int = option(0, "Random attacks to try (0: the whole enumerated space: the exact best response).",
                                min=0)

    def check(self) -> None:
        pass


@dataclass
class OptimumConfig:
    """Exact optimum by enumeration of the menu's design space."""

    max_designs: int = option(1 << 14, "Refuse to enumerate more designs than this.", min=1)

    def check(self) -> None:
        pass
