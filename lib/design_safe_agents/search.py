"""The Stackelberg game and the MaMa search (Meta-Agent vs Meta-Adversary), with its baselines.

Game: the leader (Meta-Agent) commits to a design s; the follower (Meta-Adversary) best-responds
with a*(s) = argmin_a S(s, a) over its attack set. The objective (``--objective``):

- weighted (default): U = Q + lambda * S_min, lambda = 1 [reconstructed];
- lexicographic: S_min first, Q as tie-break within ``tolerance`` (scalar S_min + tolerance * Q) [reconstructed];
- constrained: maximise S_min subject to Q >= quality_floor (infeasible designs score Q - 1) [reconstructed].

MaMa loop (the paper's steps; details marked [reconstructed]):
0. the archive is seeded with the hand-designed system;
1. the Meta-Agent samples a parent by score with a softmax temperature [reconstructed], reads its
   strongest attacks (with transcripts for an LLM Meta-Agent) and proposes an edit (a new design);
2. Q(s_t) on clean episodes (exact DP);
3. the Meta-Adversary generates a diverse candidate set (subsets x targets x styles x routes: the
   attack archive's strongest attacks plus a fresh random sample, re-searched for every design)
   and keeps the K strongest (S by exact DP);
4. (s_t, Q, S_min, strongest attacks) go to the archive; repeat T times;
5. finalists (the top F by score) are re-evaluated against fresh attacks (the full enumeration,
   i.e. the exact best response) and the best one is returned.

Baselines in the same code: quality-only search (same loop and budget, score Q, no adversary:
AFlow/ADAS-style), random search with the same adversary, the fixed-attack ablation (attacks
found once on the seed design, never re-searched), and the fixed designs hand-designed,
Guardian monitor and warning prompts.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from icmlkit.lib.core.runtime import stream_seed
from icmlkit.lib.design_safe_agents import presets as P
from icmlkit.lib.design_safe_agents.compose import PARTS, is_composed, parts
from icmlkit.lib.design_safe_agents.envs import apply_ops, design_from_bits, env_menu
from icmlkit.lib.design_safe_agents.schema import design_json, signature
from icmlkit.lib.design_safe_agents.sim import Attack, Compiled, attack_harm, enumerate_attacks, quality


@dataclass
class GameSettings:
    eps: int = 1
    styles: tuple = tuple(P.STYLES)
    max_hops: int = 2
    max_attempts: int = 3
    targets: tuple | None = None  # target ids (None: all)
    objective: str = "weighted"
    lam: float = 1.0
    tolerance: float = 0.01
    quality_floor: float = 0.8
    spread: float = 0.0   # weight of the mean per-target worst-case safety in the search score (0: off)


def search_score(q: float, s: float, per_target: dict, g: GameSettings) -> float:
    """The score the search ranks designs by: the objective, plus ``spread`` x the mean over targets of
    each target's worst-case safety [reconstructed]. S_min is flat while any target stays open (closing
    one target of twelve leaves it unchanged); the spread term rewards closing targets one by one and
    only breaks near-ties when small. Reported values are always Q and S_min themselves."""
    out = objective(q, s, g)
    if g.spread and per_target:
        out += g.spread * sum(per_target.values()) / len(per_target)
    return out


def _fill(per_target: dict, env, g: GameSettings) -> None:
    """Targets no candidate attack reached count as safe (1.0)."""
    for t in (g.targets if g.targets is not None else [t.id for t in env.targets]):
        per_target.setdefault(t, 1.0)


def objective(q: float, s: float, g: GameSettings) -> float:
    if g.objective == "weighted":
        return q + g.lam * s
    if g.objective == "lexicographic":
        return s + g.tolerance * q
    return s if q >= g.quality_floor else q - 1.0


@dataclass
class Evaluation:
    quality: float
    worst_case_safety: float
    strongest: list  # [(safety, Attack)] ascending safety, at most K
    n_attacks: int
    score: float = 0.0
    per_target: dict = field(default_factory=dict)   # target id -> its strongest attack's safety

    def summary(self) -> dict:
        s = self.strongest[0][1].to_json() if self.strongest else None
        return {"quality": self.quality, "worst_case_safety": self.worst_case_safety,
                "strongest_attack": s, "n_attacks": self.n_attacks}


def compile_design(design, env, g: GameSettings) -> Compiled:
    return Compiled(design, env, max_attempts=g.max_attempts)


def feasible(cd: Compiled, atk: Attack, eps: int) -> bool:
    """Can ``atk`` (e.g. from the attack archive) be run against this design?"""
    members = set(cd.names) | {m[0] for m in cd.monitors}
    if len(atk.compromised) > eps or not set(atk.compromised) <= members or atk.sender not in cd.spec:
        return False
    if atk.sender not in atk.compromised or atk.target not in cd.targets or \
            (atk.style not in P.STYLES and not is_composed(atk.style)):
        return False
    e = atk.executor
    if e in atk.compromised or e not in cd.spec or cd.targets[atk.target].action not in cd.perm[e]:
        return False
    if len(set(atk.route)) != len(atk.route) or atk.route[0] != atk.sender:
        return False
    return all((u, v) in cd.edges for u, v in zip(atk.route, atk.route[1:]))


def best_response(cd: Compiled, candidates, k: int = 5, diverse: bool = False,
                  per_target: dict | None = None) -> tuple[list, int]:
    """The K strongest attacks among ``candidates``: [(S(s, a), a)] ascending, ties by attack key;
    the first is argmin_a S(s, a). ``diverse``: the strongest attack of each target, the K weakest
    targets first (a diverse set for the Meta-Agent). ``per_target`` (a dict) receives each
    target's lowest safety among the candidates."""
    seen = {}
    for a in candidates:
        if a.key not in seen:
            seen[a.key] = a
    scored = sorted(((1.0 - attack_harm(cd, a), a.key, a) for a in seen.values()))
    if per_target is not None or diverse:
        first = {}
        for s, _, a in scored:
            if a.target not in first:
                first[a.target] = (s, a)
        if per_target is not None:
            per_target.update({t: s for t, (s, _) in first.items()})
        if diverse:
            return sorted(first.values(), key=lambda x: (x[0], x[1].key))[:k], len(seen)
    return [(s, a) for s, _, a in scored[:k]], len(seen)


class EnumeratingAdversary:
    """The offline Meta-Adversary: the attack archive's attacks plus a random sample of the enumerated
    space (``budget`` attacks; 0 = the whole space, the exact best response)."""

    name = "enumerating"

    def __init__(self, g: GameSettings, budget: int = 0, k: int = 5):
        self.g, self.budget, self.k = g, int(budget), int(k)

    def candidates(self, cd: Compiled, seeds, rng) -> list:
        space = enumerate_attacks(cd, self.g.eps, self.g.styles, self.g.max_hops, self.g.targets)
        if self.budget and self.budget < len(space):
            space = rng.sample(space, self.budget)
        seeds = [a for a in seeds if feasible(cd, a, self.g.eps) and (self.g.targets is None or a.target in self.g.targets)]
        return seeds + space

    def attack(self, cd: Compiled, seeds, rng, per_target: dict | None = None):
        return best_response(cd, self.candidates(cd, seeds, rng), self.k, per_target=per_target)


class ComposingAdversary:
    """The offline Meta-Adversary that composes its attack text [reconstructed]: every design gets the
    attack archive's attacks, ``mutants`` part-mutations of each of the strongest archived ones (one
    of framing / authority / obfuscation swapped: the adversary learns which parts work), and
    ``budget`` fresh attacks (a random compromised agent, target and route from the enumerated space,
    each with a random composition of the allowed styles; ``budget`` 0: every compromised agent, target
    and route once, each with a random composition -- a sweep that touches every target). Each fresh
    attack is also tried with the ``learned`` compositions of the archive's most successful attacks.
    It returns a diverse set: the strongest attack of each target, the K weakest targets first."""

    name = "composing"

    def __init__(self, g: GameSettings, budget: int = 48, k: int = 5, mutants: int = 2, mutate_top: int = 8,
                 diverse: bool = True, learned: int = 3):
        self.g, self.budget, self.k, self.mutants, self.mutate_top = g, int(budget), int(k), int(mutants), mutate_top
        self.diverse, self.learned = diverse, int(learned)

    def candidates(self, cd: Compiled, seeds, rng) -> list:
        from dataclasses import replace

        styles = list(self.g.styles)
        base = enumerate_attacks(cd, self.g.eps, (styles[0],), self.g.max_hops, self.g.targets)
        pick = rng.sample(base, self.budget) if self.budget and self.budget < len(base) else base
        ok = [a for a in seeds if feasible(cd, a, self.g.eps) and a.style in styles and
              (self.g.targets is None or a.target in self.g.targets)]
        learned = []   # the compositions of the archive's most successful attacks (seeds come sorted)
        for a in seeds:
            if a.style in styles and a.style not in learned and len(learned) < self.learned:
                learned.append(a.style)
        fresh = [replace(a, style=st) for a in pick for st in dict.fromkeys(learned + [rng.choice(styles)])]
        allowed = set(styles)
        mut = []
        for a in ok[: self.mutate_top]:
            p = parts(a.style) if is_composed(a.style) else None
            if p is None:
                continue
            for _ in range(self.mutants):
                i = rng.randrange(3)
                name = ("framing", "authority", "obfuscation")[i]
                q = list(p)
                q[i] = rng.choice([x for x in PARTS[name] if x != p[i]])
                st = "/".join(q)
                if st in allowed:
                    mut.append(replace(a, style=st, text=""))
        return ok + mut + fresh

    def attack(self, cd: Compiled, seeds, rng, per_target: dict | None = None):
        return best_response(cd, self.candidates(cd, seeds, rng), self.k, self.diverse, per_target)


def default_adversary(g: GameSettings, budget: int, k: int):
    """The composing adversary when the styles are compositions, else the enumerating one."""
    if any(is_composed(s) for s in g.styles):
        return ComposingAdversary(g, budget, k)
    return EnumeratingAdversary(g, budget, k)


def evaluate(design, env, g: GameSettings, adversary=None, seeds=(), rng=None) -> Evaluation:
    """Q(s), S_min(s) against the adversary's attacks (default: the exact best response)."""
    cd = compile_design(design, env, g)
    adv = adversary or EnumeratingAdversary(g, 0)
    per = {}
    strongest, n = adv.attack(cd, list(seeds), rng or random.Random(0), per_target=per)
    _fill(per, env, g)
    q = quality(cd)
    s = strongest[0][0] if strongest else 1.0
    return Evaluation(q, s, strongest, n, search_score(q, s, per, g), per)


# --------------------------------------------------------------------------- the Meta-Agent


def relevant_knobs(menu: list[dict], atk: Attack, cd: Compiled) -> list[int]:
    """Menu items touching the attack: its agents, its channels, its target action, monitors."""
    agents = set(atk.route) | set(atk.compromised)
    hops = set(zip(atk.route, atk.route[1:]))
    action = cd.targets[atk.target].action
    out = []
    for i, item in enumerate(menu):
        for op in item["ops"]:
            kind = op["op"]
            if kind in ("harden", "warning", "model") and (op.get("agent") == "*" or op.get("agent") in agents):
                out.append(i)
                break
            if kind in ("revoke",) and op.get("action") == action:
                out.append(i)
                break
            if kind == "remove_edge" and (op["src"], op["dst"]) in hops:
                out.append(i)
                break
            if kind in ("approval", "remove_approval") and op.get("action") == action:
                out.append(i)
                break
            if kind in ("monitor", "remove_monitor"):
                out.append(i)
                break
    return out


class ProgrammaticMetaAgent:
    """The offline Meta-Agent [reconstructed]: the LLM's interface (parent, its strongest attacks ->
    an edit) with edit operators targeted at the attacked agents, permission or channel; with
    probability ``explore`` a random toggle (which also removes defences that cost quality)."""

    name = "programmatic"

    def __init__(self, env, menu, explore: float = 0.25):
        self.env, self.menu, self.explore = env, menu, explore

    def propose(self, parent: dict, cd_parent: Compiled, rng, known: set):
        bits = list(parent["bits"])
        attacks = parent["attacks"]
        for _ in range(30):
            new = list(bits)
            if not attacks or rng.random() < self.explore:
                i = rng.randrange(len(self.menu))
                why = f"random toggle of {self.menu[i]['id']}"
            else:
                j = 0 if rng.random() < 0.6 else rng.randrange(len(attacks))
                atk = attacks[j][1]
                rel = relevant_knobs(self.menu, atk, cd_parent)
                off = [i for i in rel if not bits[i]]
                on = [i for i in rel if bits[i]]
                if off and (not on or rng.random() < 0.8):
                    i = rng.choice(off)
                    why = f"add {self.menu[i]['id']} against attack {atk.key}"
                elif on:
                    i = rng.choice(on)
                    why = f"drop {self.menu[i]['id']} (did not stop {atk.key})"
                else:
                    i = rng.randrange(len(self.menu))
                    why = f"random toggle of {self.menu[i]['id']} (no edit touches {atk.key})"
            new[i] = 1 - new[i]
            d = design_from_bits(self.env, new, self.menu)
            if signature(d) not in known:
                return d, tuple(new), why
        return d, tuple(new), why + " (duplicate)"


def attack_knobs(menu: list[dict], atk: Attack, cd: Compiled) -> list[int]:
    """The knobs an attack's outcome depends on (the multi-edit Meta-Agent's reading of an attack): the
    agents on its route, its compromised agents and the approvers of its target action (harden /
    warning / model), permissions of its target action, its channels (cut; the relays a gate removes),
    its action's approval rule, and the monitors watching an agent of its route."""
    agents = set(atk.route) | set(atk.compromised)
    hops = set(zip(atk.route, atk.route[1:]))
    action = cd.targets[atk.target].action
    approvers = set(cd.approval.get(action, ((), 0))[0])
    out = []
    for i, item in enumerate(menu):
        for op in item["ops"]:
            kind = op["op"]
            hit = False
            if kind in ("harden", "warning", "model"):
                hit = op.get("agent") == "*" or op.get("agent") in agents | approvers
            elif kind in ("revoke", "grant", "approval", "remove_approval"):
                hit = op.get("action") == action
            elif kind == "remove_edge":
                hit = (op["src"], op["dst"]) in hops
            elif kind in ("monitor", "remove_monitor"):
                w = op.get("watches")
                hit = w is None or "*" in w or bool(set(w) & agents)
            if hit:
                out.append(i)
                break
    return out


class MultiEditMetaAgent:
    """The multi-edit offline Meta-Agent [reconstructed]: reads the parent's strongest attacks and
    proposes 1..``edits`` knob toggles at once, the t-th one against the t-th strongest attack: it
    switches on an off knob that attack depends on (:func:`attack_knobs`), or (probability
    ``drop``) switches off an on knob it depends on that did not stop it (quality back). With
    probability ``explore`` the proposal is random toggles instead.

    At the quality floor (a parent within ``margin`` of ``quality_floor``, when given) half of the
    edits instead switch off an on knob that none of the parent's strongest attacks depends on (quality
    back where it does not open the weakest targets).

    ``feedback=False`` is the ablation with the adversary's feedback off: the same number of edits
    and the same add / drop ratios (also at the floor), on knobs drawn uniformly (the attacks are not
    read); selection by the archive's scores (which the adversary still computes) is unchanged."""

    def __init__(self, env, menu, explore: float = 0.25, edits: int = 3, feedback: bool = True, drop: float = 0.2,
                 quality_floor: float | None = None, margin: float = 0.005):
        self.env, self.menu, self.explore, self.edits = env, menu, explore, max(1, int(edits))
        self.feedback, self.drop = feedback, drop
        self.quality_floor, self.margin = quality_floor, margin
        self.name = "multi-edit" if feedback else "multi-edit-blind"

    def _one(self, new, rng, atk, cd):
        if atk is None:
            pool = list(range(len(self.menu)))
            rel_off = [i for i in pool if not new[i]]
            rel_on = [i for i in pool if new[i]]
            tag = "blind"
        else:
            rel = attack_knobs(self.menu, atk, cd)
            rel_off = [i for i in rel if not new[i]]
            rel_on = [i for i in rel if new[i]]
            tag = f"vs {atk.key}"
        if rel_off and (not rel_on or rng.random() >= self.drop):
            i = rng.choice(rel_off)
            return i, f"add {self.menu[i]['id']} ({tag})"
        if rel_on:
            i = rng.choice(rel_on)
            return i, f"drop {self.menu[i]['id']} ({tag})"
        i = rng.randrange(len(self.menu))
        return i, f"toggle {self.menu[i]['id']} (nothing left {tag})"

    def propose(self, parent: dict, cd_parent: Compiled, rng, known: set):
        bits = list(parent["bits"])
        attacks = parent["attacks"] if self.feedback else []
        at_floor = self.quality_floor is not None and parent.get("quality") is not None and \
            parent["quality"] < self.quality_floor + self.margin
        spare = set(range(len(self.menu)))
        for _, a in attacks:
            spare -= set(attack_knobs(self.menu, a, cd_parent))
        for _ in range(30):
            new = list(bits)
            n = rng.randint(1, self.edits)
            whys = []
            explore = rng.random() < self.explore
            for t in range(n):
                on_spare = [i for i in spare if new[i]] if self.feedback else [i for i in range(len(new)) if new[i]]
                if at_floor and on_spare and rng.random() < 0.5:
                    i = rng.choice(sorted(on_spare))
                    why = f"drop {self.menu[i]['id']} (quality at the floor{'' if self.feedback else ', blind'})"
                elif explore:
                    i = rng.randrange(len(self.menu))
                    why = f"random toggle of {self.menu[i]['id']}"
                elif self.feedback and attacks:
                    i, why = self._one(new, rng, attacks[min(t, len(attacks) - 1)][1], cd_parent)
                else:
                    i, why = self._one(new, rng, None, cd_parent)
                new[i] = 1 - new[i]
                whys.append(why)
            if new == bits:
                continue
            d = design_from_bits(self.env, new, self.menu)
            if signature(d) not in known:
                return d, tuple(new), "; ".join(whys)
        return d, tuple(new), "; ".join(whys) + " (duplicate)"


class RandomToggleAgent:
    """The quality-only search's proposer (AFlow/ADAS-style, no attack information): a random toggle."""

    name = "random-toggle"

    def __init__(self, env, menu):
        self.env, self.menu = env, menu

    def propose(self, parent: dict, cd_parent, rng, known: set):
        bits = list(parent["bits"])
        for _ in range(30):
            new = list(bits)
            i = rng.randrange(len(self.menu))
            new[i] = 1 - new[i]
            d = design_from_bits(self.env, new, self.menu)
            if signature(d) not in known:
                break
        return d, tuple(new), f"toggle {self.menu[i]['id']}"


# --------------------------------------------------------------------------- the loop


@dataclass
class SearchSettings:
    iterations: int = 40
    method: str = "mama"          # mama | quality-only | random | fixed-attack | feedback-off
    temperature: float = 0.05
    attack_budget: int = 48       # fresh random attacks per design (0: the whole space)
    keep: int = 5                 # K strongest attacks kept per design
    finalists: int = 3
    explore: float = 0.25
    edits: int = 1                # >1: the multi-edit Meta-Agent (up to this many toggles per proposal)


@dataclass
class SearchState:
    archive: list = field(default_factory=list)
    attack_archive: dict = field(default_factory=dict)  # key -> [Attack, times among the K strongest]
    log: list = field(default_factory=list)
    iteration: int = 0


def _entry(it, design, bits, ev: Evaluation, parent, why, score) -> dict:
    return {"iteration": it, "design": design, "bits": tuple(bits) if bits is not None else None,
            "signature": signature(design), "quality": ev.quality, "worst_case_safety": ev.worst_case_safety,
            "score": score, "attacks": ev.strongest, "n_attacks": ev.n_attacks, "parent": parent, "edit": why}


def sample_parent(archive: list, temperature: float, rng) -> int:
    """Softmax over archive scores with ``temperature`` [reconstructed]."""
    scores = [e["score"] for e in archive]
    top = max(scores)
    w = [math.exp((s - top) / max(temperature, 1e-9)) for s in scores]
    r = rng.random() * sum(w)
    acc = 0.0
    for i, x in enumerate(w):
        acc += x
        if r <= acc:
            return i
    return len(w) - 1


def run_search(env, g: GameSettings, s: SearchSettings, seed: int, meta_agent=None, adversary=None,
               state: SearchState | None = None, on_iteration=None, progress=None):
    """MaMa (or a baseline) for ``s.iterations`` iterations; returns (state, finalists, best entry).

    ``on_iteration(state)`` is called after each iteration (checkpoints); ``state`` resumes."""
    menu = env_menu(env)
    if meta_agent is None:
        if s.method in ("quality-only", "random"):
            meta_agent = RandomToggleAgent(env, menu)
        elif s.edits > 1 or s.method == "feedback-off":
            meta_agent = MultiEditMetaAgent(env, menu, s.explore, s.edits, feedback=s.method != "feedback-off",
                                            quality_floor=g.quality_floor if g.objective == "constrained" else None)
        else:
            meta_agent = ProgrammaticMetaAgent(env, menu, s.explore)
    adv = adversary or default_adversary(g, s.attack_budget, s.keep)
    st = state or SearchState()
    fixed = None

    def score_of(q, smin, per):
        return q if s.method == "quality-only" else search_score(q, smin, per, g)

    def assess(design, rng):
        cd = compile_design(design, env, g)
        q = quality(cd)
        if s.method == "quality-only":
            return Evaluation(q, None, [], 0, q)
        per = {}
        if s.method == "fixed-attack":
            strongest, n = best_response(cd, [a for a in fixed if feasible(cd, a, g.eps)], s.keep, per_target=per)
        else:
            seeds = sorted(st.attack_archive.values(), key=lambda x: (-x[1], x[0].key))[: 4 * s.keep]
            strongest, n = adv.attack(cd, [a for a, _ in seeds], rng, per_target=per)
        smin = strongest[0][0] if strongest else 1.0
        _fill(per, env, g)
        return Evaluation(q, smin, strongest, n, score_of(q, smin, per), per)

    if s.method == "fixed-attack":
        cd0 = compile_design(env.base_design, env, g)
        fixed = [a for _, a in best_response(cd0, adv.candidates(cd0, [], random.Random(stream_seed(seed, "fixed"))),
                                             10 ** 9)[0][: 4 * s.keep]]
    if not st.archive:
        bits0 = tuple([0] * len(menu))
        d0 = design_from_bits(env, bits0, menu)
        ev = assess(d0, random.Random(stream_seed(seed, "iter0")))
        st.archive.append(_entry(0, d0, bits0, ev, None, "seed: hand-designed", ev.score))
        _remember(st, ev)
        st.log.append(_log_row(st, 0, None, "seed: hand-designed", getattr(meta_agent, "calls", 0)))
    known = {e["signature"] for e in st.archive}
    for it in range(st.iteration + 1, s.iterations + 1):
        rng = random.Random(stream_seed(seed, f"iter{it}"))
        if s.method == "random":
            bits = tuple(rng.randrange(2) for _ in menu)
            d, why, pi = design_from_bits(env, bits, menu), "random design", None
        else:
            pi = sample_parent(st.archive, s.temperature, rng)
            parent = st.archive[pi]
            cdp = compile_design(parent["design"], env, g)
            d, bits, why = meta_agent.propose(parent, cdp, rng, known)
        ev = assess(d, rng)
        st.archive.append(_entry(it, d, bits, ev, pi, why, ev.score))
        known.add(signature(d))
        _remember(st, ev)
        st.iteration = it
        st.log.append(_log_row(st, it, pi, why, getattr(meta_agent, "calls", 0)))
        if progress is not None:
            progress(it)
        if on_iteration is not None:
            on_iteration(st)
    finalists = final_evaluation(env, g, st, s)
    return st, finalists


def _remember(st: SearchState, ev: Evaluation) -> None:
    for _, a in ev.strongest:
        if a.key in st.attack_archive:
            st.attack_archive[a.key][1] += 1
        else:
            st.attack_archive[a.key] = [a, 1]


def _log_row(st: SearchState, it, parent, why, calls) -> dict:
    best = max(st.archive, key=lambda e: e["score"])
    last = st.archive[-1]
    return {"iteration": it, "n_designs": len(st.archive), "parent": "" if parent is None else parent,
            "quality": round(last["quality"], 6),
            "worst_case_safety": "" if last["worst_case_safety"] is None else round(last["worst_case_safety"], 6),
            "score": round(last["score"], 6), "best_score": round(best["score"], 6), "edit": why, "llm_calls": calls}


def final_evaluation(env, g: GameSettings, st: SearchState, s: SearchSettings) -> list:
    """Step 5: the top finalists (distinct designs) re-evaluated against fresh attacks (the exact best
    response over the whole enumerated space); returns them sorted best first."""
    ranked = sorted(range(len(st.archive)), key=lambda i: (-st.archive[i]["score"], i))
    out, seen = [], set()
    for i in ranked:
        e = st.archive[i]
        if e["signature"] in seen:
            continue
        seen.add(e["signature"])
        ev = evaluate(e["design"], env, g)
        score = ev.quality if s.method == "quality-only" else ev.score
        out.append({"index": i, "entry": e, "eval": ev, "score": score})
        if len(out) >= s.finalists:
            break
    out.sort(key=lambda f: (-f["score"], f["index"]))
    return out


# --------------------------------------------------------------------------- fixed baselines


def baseline_designs(env) -> dict:
    """The hand-designed system, + a Guardian monitor (watches all, stops on a flag), + warning prompts."""
    d0 = env.base_design
    guardian = apply_ops(d0, [{"op": "monitor", "name": "guardian", "watches": ["*"], "detection": 0.7,
                               "false_positive": 0.01, "stop_on_flag": True}])
    guardian.name = "guardian-monitor"
    warn = apply_ops(d0, [{"op": "warning", "agent": "*"}])
    warn.name = "warning-prompts"
    return {"hand-designed": d0, "guardian": guardian, "warning-prompts": warn}


def refuse_everything(env):
    """The degenerate design: no channels, everyone hardened (safe, useless)."""
    d = apply_ops(env.base_design, [{"op": "harden", "agent": "*"}])
    obj = design_json(d)
    obj["edges"] = []
    obj["name"] = "refuse-everything"
    from icmlkit.lib.design_safe_agents.schema import Design

    return Design.model_validate(obj)
