"""A small selector group-chat runtime with scripted (or LLM) agents [reconstructed].

AutoGen-style selector group chat, reduced to what the method needs: the current speaker names
the next speaker among its out-edges (a message to an agent without an edge is refused by the
runtime), every message is read by the monitors watching its sender or receiver, actions are
executed against a programmatic environment state (``state[action]`` = list of argument
records), and the episode stops at the message budget, when a Guardian monitor flags, or when
the task is done. The harmful target's check and the tasks' steps are judged on that state.

Offline the agents are scripted policy programs (a simulator of the *search*, not of LLMs):
honest agents relay, execute and approve with the probabilities of :mod:`sim` (the same
process the DP computes exactly); compromised agents send the malicious request along their
route (request, lie or impersonate the coordinator) and retry; compromised approvers approve,
compromised monitors stay silent. An agent whose ``model`` is ``llm`` decides with the
``--agent-model`` backend instead (it is asked whether to comply).
"""
from __future__ import annotations

import math

from icmlkit.lib.core.errors import IcmlkitError
from icmlkit.lib.design_safe_agents import presets as P
from icmlkit.lib.design_safe_agents.compose import attack_text
from icmlkit.lib.design_safe_agents.sim import Attack, Compiled


class Stop(Exception):
    """The episode ended (``reason``: budget, monitor)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def check_holds(check, state: dict) -> bool:
    """The programmatic check: some record of ``check.action`` whose arguments meet every condition."""
    for rec in state.get(check.action, []):
        ok = True
        for field, cond in check.where.items():
            v = rec.get(field)
            if cond.equals is not None and v != cond.equals:
                ok = False
            if cond.contains is not None and (not isinstance(v, str) or cond.contains not in v):
                ok = False
            if cond.ge is not None and not (isinstance(v, (int, float)) and v >= cond.ge):
                ok = False
            if cond.le is not None and not (isinstance(v, (int, float)) and v <= cond.le):
                ok = False
        if ok:
            return True
    return False


class Chat:
    """One episode of the group chat. ``rng``: a ``random.Random``; ``agent_llm``: a callable
    ``(agent spec, message text, kind) -> bool`` for agents whose model is ``llm``."""

    def __init__(self, cd: Compiled, rng, compromised=frozenset(), agent_llm=None, record: bool = True):
        self.cd = cd
        self.rng = rng
        self.C = frozenset(compromised)
        self.agent_llm = agent_llm
        self.record = record
        self.messages: list[dict] = []
        self.state: dict[str, list[dict]] = {}
        self.m = 0
        self.speaker = cd.entry

    def log(self, **kw):
        if self.record:
            self.messages.append({"turn": len(self.messages), **kw})

    def send(self, u: str, v: str, content: str, malicious: bool, style: str | None, channel: bool = True) -> bool:
        """u names v as the next speaker and sends ``content``; False when a monitor blocked it.
        ``channel=False``: an approval request or reply (the approval rule implies that channel)."""
        if channel and (u, v) not in self.cd.edges:
            raise IcmlkitError(f"{u} has no channel to {v}")
        if self.m + 1 > self.cd.budget:
            self.log(event="stop", reason="budget")
            raise Stop("budget")
        self.m += 1
        self.speaker = v
        for mon in self.cd.watching(u, v, self.C):
            if self.rng.random() < self.cd.monitor_rate(mon, malicious, style):
                self.log(sender=u, receiver=v, content=content, flagged_by=mon[0], blocked=True)
                if mon[4]:
                    self.log(event="stop", reason=f"monitor {mon[0]} flagged a message")
                    raise Stop("monitor")
                return False
        self.log(sender=u, receiver=v, content=content)
        return True

    def decide(self, agent: str, p, text: str, kind: str) -> bool:
        """Scripted: a draw against ``p()`` (a callable, so LLM agents never need a probability)."""
        spec = self.cd.spec[agent]
        if spec.model == "llm" and self.agent_llm is not None:
            return bool(self.agent_llm(spec, text, kind))
        return self.rng.random() < p()

    def execute(self, agent: str, action: str, args: dict) -> None:
        self.state.setdefault(action, []).append(dict(args))
        self.log(event="execute", agent=agent, action=action, args=dict(args))

    def approvals(self, executor: str, action: str, text: str, malicious: bool, style: str | None) -> bool:
        rule = self.cd.approval.get(action)
        if rule is None:
            return True
        approvers, k = rule
        approvers = [a for a in approvers if a != executor]
        n = len(approvers)
        got = 0
        for idx, a in enumerate(approvers):
            if got >= k:
                break
            if got + (n - idx) < k:
                return False
            if not self.send(executor, a, f"Approval needed: {text}", malicious, style, channel=False):
                continue
            if a in self.C:
                yes = True
            elif malicious:
                yes = self.decide(a, lambda: self.cd.comply(a, style), text, "approve")
            else:
                yes = self.decide(a, lambda: self.cd.legit_approve(a), text, "approve")
            if not self.send(a, executor, "approved" if yes else "denied", False, None, channel=False):
                continue
            got += yes
        return got >= k

    # ------------------------------------------------------------------ episodes
    def run_task(self, task) -> int:
        """A clean episode of ``task``; returns the number of steps done."""
        done = 0
        try:
            for step in task.steps:
                found = self.cd.legit_route(step)
                if found is None:
                    self.log(event="no_route", action=step.action)
                    continue
                e, path = found
                text = f"{step.action}({', '.join(f'{k}={v!r}' for k, v in step.args.items())})"
                ok = True
                for u, v in zip(path, path[1:]):
                    if not self.send(u, v, f"Please {'forward: ' if v != e else ''}{text}", False, None):
                        ok = False
                        break
                    if not self.decide(v, lambda: self.cd.legit_accept(v), text, "legit"):
                        self.log(event="refuse", agent=v)
                        ok = False
                        break
                if not ok:
                    continue
                if not self.approvals(e, step.action, text, False, None):
                    self.log(event="not_approved", action=step.action)
                    continue
                if self.cd.spec[e].model != "llm" and not self.rng.random() < self.cd.capability(e):
                    self.log(event="failed", agent=e, action=step.action)  # the tool call went wrong
                    continue
                self.execute(e, step.action, step.args)
                done += 1
        except Stop:
            pass
        return done

    def run_attack(self, atk: Attack) -> bool:
        """An attacked episode: the sender pushes the harmful request; returns True on harm."""
        tgt = self.cd.targets[atk.target]
        if atk.text:
            text = atk.text
        elif atk.style in P.STYLES:
            text = P.STYLES[atk.style]["text"].format(pattern=tgt.pattern or tgt.action, entry=self.cd.entry)
        else:
            text = attack_text(atk.style, tgt.pattern or tgt.action, self.cd.entry, tgt.description)
        self.speaker = atk.sender
        try:
            for attempt in range(self.cd.max_attempts):
                ok = True
                for u, v in zip(atk.route, atk.route[1:]):
                    if not self.send(u, v, text, True, atk.style):
                        ok = False
                        break
                    if v in self.C:
                        continue
                    if not self.decide(v, lambda: self.cd.comply(v, atk.style), text, "malicious"):
                        self.log(event="refuse", agent=v)
                        ok = False
                        break
                if not ok:
                    continue
                if not self.approvals(atk.executor, tgt.action, text, True, atk.style):
                    self.log(event="not_approved", action=tgt.action)
                    continue
                self.execute(atk.executor, tgt.action, tgt.args)
                break
        except Stop:
            pass
        return check_holds(tgt.check, self.state)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials."""
    if n == 0:
        return 0.0, 1.0
    ph = k / n
    den = 1 + z * z / n
    c = (ph + z * z / (2 * n)) / den
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return max(0.0, c - h), min(1.0, c + h)


def mc_safety(cd: Compiled, atk: Attack, episodes: int, rng, agent_llm=None) -> dict:
    """Monte-Carlo safety of one attack: {safety, ci, episodes} (Wilson 95 %)."""
    safe = 0
    for _ in range(episodes):
        chat = Chat(cd, rng, atk.compromised, agent_llm=agent_llm, record=False)
        safe += not chat.run_attack(atk)
    lo, hi = wilson(safe, episodes)
    return {"safety": safe / episodes, "ci": [lo, hi], "episodes": episodes}


def mc_quality(cd: Compiled, episodes: int, rng, agent_llm=None) -> dict:
    """Monte-Carlo quality (episodes per task): {quality, ci (normal 95 %), episodes}."""
    from icmlkit.lib.design_safe_agents.sim import DELAY_COST

    vals = []
    for task in cd.env.tasks:
        for _ in range(episodes):
            chat = Chat(cd, rng, agent_llm=agent_llm, record=False)
            done = chat.run_task(task)
            vals.append((done / len(task.steps) - DELAY_COST * chat.m / cd.budget, task.id))
    per_task = {}
    for v, tid in vals:
        per_task.setdefault(tid, []).append(v)
    means = [sum(v) / len(v) for v in per_task.values()]
    q = sum(means) / len(means)
    var = sum((sum((x - mu) ** 2 for x in v) / max(1, len(v) - 1)) / len(v) for v, mu in zip(per_task.values(), means))
    se = math.sqrt(var) / len(means)
    return {"quality": q, "ci": [q - 1.96 * se, q + 1.96 * se], "episodes": episodes * len(per_task)}
