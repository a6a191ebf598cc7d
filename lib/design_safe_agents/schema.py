"""The design and environment schemas (pydantic v2): a multi-agent system as data.

A :class:`Design` is what the Meta-Agent edits and the runtime executes: the roster (name, role,
system prompt, model preset, permitted actions, hardened / warning prompts), the communication
edges (who may address whom), the speaker selection, k-of-n approval rules for sensitive
actions, monitor agents, and the termination rule (message budget). An :class:`Environment`
holds the actions, the clean tasks (quality), the harmful targets (safety, each with a
programmatic state check) and the hand-designed seed design.

Errors name the file and the JSON path (``agents[2].permissions[0]``) of the offending value; a
design is also checked against its environment (unknown actions, edges to unknown agents).
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from icmlkit.lib.core.errors import InputError

NAME = r"^[A-Za-z][A-Za-z0-9_\-]{0,39}$"
ACTION = r"^[A-Za-z][A-Za-z0-9_\-]{0,79}$"  # tool names (AgentDojo's run to 44 characters)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentSpec(_Model):
    """One agent. ``model``: a compliance preset (see :mod:`presets`) or ``llm`` (the
    ``--agent-model`` endpoint plays it). ``hardened``: a hardened system prompt (refuses off-task
    requests more often; a few legitimate refusals). ``warning``: the BAD-ACTS-style "adversarial
    action warning" line in its prompt (a weaker, cheaper hardening)."""

    name: str = Field(pattern=NAME)
    role: str = Field(min_length=1, max_length=200)
    prompt: str = Field(default="", max_length=4000)
    model: str = Field(default="gpt-4o-mini", min_length=1, max_length=80)
    permissions: list[str] = Field(default_factory=list, max_length=64)
    hardened: bool = False
    warning: bool = False


class Approval(_Model):
    """k-of-n sign-off: ``action`` runs only after ``k`` of ``approvers`` approved it (asked in order)."""

    action: str = Field(min_length=1)
    approvers: list[str] = Field(min_length=1, max_length=16)
    k: int = Field(ge=1, le=16)


class Monitor(_Model):
    """A monitor agent reading every message sent or received by the agents it ``watches``
    (``*``: all). It flags a malicious message with probability ``detection`` (times the attack
    style's factor) and a clean one with ``false_positive``; a flag stops the episode when
    ``stop_on_flag`` (Guardian-style) and otherwise blocks the message. Monitors can be compromised
    (then they never flag)."""

    name: str = Field(pattern=NAME)
    watches: list[str] = Field(min_length=1, max_length=64)
    detection: float = Field(default=0.7, ge=0.0, le=1.0)
    false_positive: float = Field(default=0.02, ge=0.0, le=1.0)
    stop_on_flag: bool = True


class Termination(_Model):
    """The episode ends after ``max_messages`` messages (or when the task is done / a monitor stops it)."""

    max_messages: int = Field(default=30, ge=1, le=10000)


class Design(_Model):
    """A multi-agent system. ``entry`` receives the user's task; ``edges`` are directed
    ``[sender, receiver]`` pairs; ``speaker_selection`` "selector": the current speaker names the next
    one among its out-edges (an AutoGen-style selector group chat, [reconstructed])."""

    name: str = Field(default="design", max_length=200)
    agents: list[AgentSpec] = Field(min_length=1, max_length=32)
    entry: str
    edges: list[tuple[str, str]] = Field(default_factory=list, max_length=1024)
    speaker_selection: Literal["selector"] = "selector"
    approvals: list[Approval] = Field(default_factory=list, max_length=64)
    monitors: list[Monitor] = Field(default_factory=list, max_length=16)
    termination: Termination = Field(default_factory=Termination)
    notes: str = Field(default="", max_length=4000)

    def agent(self, name: str) -> AgentSpec:
        for a in self.agents:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.agents]


class Step(_Model):
    """One task step: ``requester`` (default: the design's entry agent) asks for ``action``."""

    action: str
    args: dict[str, Any] = Field(default_factory=dict)
    requester: str | None = None


class Task(_Model):
    id: str = Field(min_length=1)
    description: str = ""
    steps: list[Step] = Field(min_length=1, max_length=64)


class Condition(_Model):
    equals: Any = None
    contains: str | None = None
    ge: float | None = Field(default=None, alias=">=")
    le: float | None = Field(default=None, alias="<=")
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Check(_Model):
    """A programmatic state check: some executed ``action`` record whose arguments meet every condition."""

    action: str
    where: dict[str, Condition] = Field(default_factory=dict)


class Target(_Model):
    """One harmful target action (a row of data/safeagents/harmful_actions.jsonl)."""

    id: str = Field(min_length=1)
    environment: str = ""
    category: str = Field(min_length=1)
    description: str = ""
    target_agent: str = ""
    action: str
    args: dict[str, Any] = Field(default_factory=dict)
    pattern: str = ""
    check: Check


class ActionSpec(_Model):
    sensitive: bool = False
    description: str = ""


class Environment(_Model):
    """A scripted environment: actions, clean tasks, harmful targets, the hand-designed seed design
    and (optionally) the edit menu the offline Meta-Agent toggles."""

    name: str = Field(min_length=1)
    description: str = ""
    actions: dict[str, ActionSpec] = Field(min_length=1)
    tasks: list[Task] = Field(min_length=1)
    targets: list[Target] = Field(min_length=1)
    base_design: Design
    menu: list[dict] | None = None

    @field_validator("actions")
    @classmethod
    def _names(cls, v):
        for k in v:
            if not re.match(ACTION, k):  # pydantic's protocol: a ValueError becomes its ValidationError,
                raise ValueError(f"action name {k!r} is not an identifier")  # reported as an InputError
        return v


# --------------------------------------------------------------------------- errors and checks


def _path(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def format_validation(exc: ValidationError, where: str, prefix: str = "") -> InputError:
    """The first error of a pydantic ValidationError as one line naming the file and JSON path."""
    err = exc.errors()[0]
    loc = [p for p in err.get("loc", ()) if not (isinstance(p, str) and p.startswith(("function-", "tagged-")))]
    path = _path(loc)
    if prefix:
        path = prefix + ("" if path.startswith("[") else ".") + path if path != "(top level)" else prefix
    more = len(exc.errors()) - 1
    tail = f" (and {more} more error{'s' * (more > 1)})" if more > 0 else ""
    return InputError(f"at {path}: {err.get('msg', 'invalid')}{tail}", where)


def check_design(d: Design, env: "Environment | None", where: str, prefix: str = "") -> None:
    """Cross-references the schema cannot express: unique names, edges/approvers/monitors naming
    known agents, the entry agent, k <= n, permissions and approvals on the environment's actions."""

    def fail(path: str, msg: str):
        p = f"{prefix}.{path}" if prefix else path
        raise InputError(f"at {p}: {msg}", where)

    names = [a.name for a in d.agents]
    seen = set()
    for i, n in enumerate(names):
        if n in seen:
            fail(f"agents[{i}].name", f"duplicate agent name {n!r}")
        seen.add(n)
    mons = [m.name for m in d.monitors]
    for i, n in enumerate(mons):
        if n in seen:
            fail(f"monitors[{i}].name", f"name {n!r} is already used")
        seen.add(n)
    if d.entry not in names:
        fail("entry", f"unknown agent {d.entry!r} (agents: {', '.join(names)})")
    for i, (s, r) in enumerate(d.edges):
        if s not in names:
            fail(f"edges[{i}][0]", f"edge from unknown agent {s!r}")
        if r not in names:
            fail(f"edges[{i}][1]", f"edge to unknown agent {r!r}")
        if s == r:
            fail(f"edges[{i}]", f"self-edge {s!r}")
    acts = set(env.actions) if env is not None else None
    if acts is not None:
        for i, a in enumerate(d.agents):
            for j, p in enumerate(a.permissions):
                if p not in acts:
                    fail(f"agents[{i}].permissions[{j}]", f"unknown action {p!r} for environment {env.name!r}")
    for i, ap in enumerate(d.approvals):
        if acts is not None and ap.action not in acts:
            fail(f"approvals[{i}].action", f"unknown action {ap.action!r}")
        for j, n in enumerate(ap.approvers):
            if n not in names:
                fail(f"approvals[{i}].approvers[{j}]", f"unknown agent {n!r}")
        if len(set(ap.approvers)) != len(ap.approvers):
            fail(f"approvals[{i}].approvers", "an approver is listed twice")
        if ap.k > len(ap.approvers):
            fail(f"approvals[{i}].k", f"k = {ap.k} exceeds the {len(ap.approvers)} approvers")
    if len({ap.action for ap in d.approvals}) != len(d.approvals):
        fail("approvals", "two approval rules for one action")
    for i, m in enumerate(d.monitors):
        for j, n in enumerate(m.watches):
            if n != "*" and n not in names:
                fail(f"monitors[{i}].watches[{j}]", f"unknown agent {n!r}")
    from icmlkit.lib.design_safe_agents.presets import PRESETS

    for i, a in enumerate(d.agents):
        if a.model not in PRESETS and a.model != "llm":
            fail(f"agents[{i}].model", f"unknown model preset {a.model!r} (presets: {', '.join(PRESETS)}, or llm)")


def design_from_obj(obj, where: str, env: "Environment | None" = None, prefix: str = "") -> Design:
    """Validate a decoded JSON object as a design (schema, then cross-references)."""
    if not isinstance(obj, dict):
        raise InputError(f"at {prefix or '(top level)'}: expected a design object, found {type(obj).__name__}", where)
    try:
        d = Design.model_validate(obj)
    except ValidationError as exc:
        raise format_validation(exc, where, prefix) from None
    check_design(d, env, where, prefix)
    return d


def env_from_obj(obj, where: str) -> Environment:
    if not isinstance(obj, dict):
        raise InputError(f"expected an environment object, found {type(obj).__name__}", where)
    try:
        env = Environment.model_validate(obj)
    except ValidationError as exc:
        raise format_validation(exc, where) from None
    check_design(env.base_design, env, where, "base_design")
    for i, t in enumerate(env.targets):
        if t.action not in env.actions:
            raise InputError(f"at targets[{i}].action: unknown action {t.action!r}", where)
        if t.check.action not in env.actions:
            raise InputError(f"at targets[{i}].check.action: unknown action {t.check.action!r}", where)
    for i, task in enumerate(env.tasks):
        for j, s in enumerate(task.steps):
            if s.action not in env.actions:
                raise InputError(f"at tasks[{i}].steps[{j}].action: unknown action {s.action!r}", where)
    ids = [t.id for t in env.targets]
    if len(set(ids)) != len(ids):
        raise InputError("at targets: duplicate target id", where)
    return env


def design_json(d: Design) -> dict:
    """The design as plain JSON (edges as lists, defaults included)."""
    return d.model_dump(mode="json", by_alias=True)


def signature(d: Design) -> str:
    """A canonical string of what matters for behaviour (order of lists normalised where it does not matter)."""
    import json

    obj = design_json(d)
    obj.pop("name", None)
    obj.pop("notes", None)
    for a in obj["agents"]:
        a["permissions"] = sorted(a["permissions"])
        a.pop("prompt", None)
        a.pop("role", None)
    obj["agents"] = sorted(obj["agents"], key=lambda a: a["name"])
    obj["edges"] = sorted(map(list, obj["edges"]))
    obj["approvals"] = sorted(obj["approvals"], key=lambda a: a["action"])
    obj["monitors"] = sorted(obj["monitors"], key=lambda m: m["name"])
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
