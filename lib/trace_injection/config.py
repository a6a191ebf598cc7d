"""Configurable tables of CausalTrace: sensitive sinks, trust of tools, instruction cues, defaults.

Every table can be replaced from a JSON/TOML file (``--sinks FILE`` on the command line): a
mapping of regular expression (matched against the lower-cased function name, or ``METHOD url``
for HTTP events) -> sink category.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from icmlkit.lib.core.errors import UsageError

# Step 1: sink table (regex on the function name -> category). "answer" is the agent's final text
# to the user: a sink only for the causal check (an injection can make the agent say things), never
# counted as a "sensitive" sink for N3 or the "sink present" baseline.
DEFAULT_SINKS: dict[str, str] = {
    r"^(send_money|schedule_transaction|update_scheduled_transaction|transfer\w*|pay\w*)$": "payment",
    r"^(update_password|change_password|reset_password|update_user_info)$": "credentials",
    r"^(send_email|forward_email|reply_email|send_direct_message|send_channel_message|post_message)$": "message",
    r"^(delete_\w+|remove_\w+)$": "delete",
    r"^(share_file|append_to_file|create_file|write_file|upload\w*)$": "file_write",
    r"^(post_webpage|http_post|post|put|http_put|webhook\w*)$": "http_post",
    r"^(get_webpage|visit_url|open_url|browse\w*)$": "http_get",
    r"^(run_code|exec\w*|shell|bash|run_command|python|execute_\w+)$": "code_exec",
    r"^(invite_user\w*|add_user\w*)$": "access",
    r"^(reserve_\w+|book_\w+)$": "booking",
    r"^(create_calendar_event|add_calendar_event_participants|reschedule_calendar_event|cancel_calendar_event)$":
        "calendar",
    r"^respond$": "answer",
}

# Step 1: trust domains. Events from these roles are trusted; tool outputs and any other external
# content are untrusted unless the trace says otherwise.
TRUSTED_ROLES = ("system", "user", "developer")

# Instruction-likeness cues (content only; never the trace's ground-truth flags): generic cues from
# the prompt-injection literature and AgentDojo's published attacks, none taken from make-dataset's
# own templates. A weak feature only (piece scores; see graph.py), never the gate of a treatment.
MARKERS = (
    r"<information>", r"</information>", r"\bignore (all |your |the )?(previous|prior|earlier|above)",
    r"\bdisregard\b", r"###\s*\(?system", r"\bsystem[_ ]message\b", r"\btodo\s*:",
    r"\bimportant\s*!+", r"\bbefore you (can )?(solve|do|continue|answer)", r"\b(ai|the) (assistant|model|agent)\b",
    r"\bnew instructions?\b",
)
MARKER_RE = re.compile("|".join(MARKERS), re.IGNORECASE)

# Verbs that start an instruction to an agent (imperative mood) and map onto tool actions.
ACTION_VERBS = (
    "send", "transfer", "pay", "forward", "email", "delete", "remove", "post", "visit", "invite", "add",
    "create", "make", "reserve", "book", "update", "change", "modify", "share", "concatenate", "say",
    "tell", "get", "write", "upload", "run", "execute", "schedule", "reply", "give", "find", "read", "list",
)

# Token synonyms used when matching a function name against text (instruction patterns).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "money": ("transaction", "transfer", "pay", "payment", "send", "iban", "account", "amount"),
    "send": ("send", "transfer", "pay", "forward", "mail"),
    "email": ("email", "mail", "e-mail", "emails"),
    "message": ("message", "messages", "dm", "text", "link"),
    "webpage": ("webpage", "website", "web", "site", "link", "url", "page"),
    "password": ("password", "credential", "credentials"),
    "reserve": ("reservation", "reserve", "book", "booking"),
    "hotel": ("hotel", "room"),
    "calendar": ("calendar", "event", "meeting", "appointment"),
    "event": ("event", "meeting", "appointment", "calendar"),
    "file": ("file", "document", "drive", "doc"),
    "user": ("user", "him", "her", "member", "invite"),
    "channel": ("channel", "channels"),
    "delete": ("delete", "remove", "erase"),
    "scheduled": ("scheduled", "recurring", "schedule"),
    "transaction": ("transaction", "payment", "transfer", "recurring"),
    "info": ("info", "information", "address", "details"),
    "post": ("post", "publish", "upload"),
    "invite": ("invite", "add"),
    "create": ("create", "add", "make", "schedule", "new", "set"),
    "add": ("add", "create", "invite", "include", "put"),
}
GENERIC_TOKENS = {"get", "read", "list", "search", "all", "by", "to", "from", "for", "the", "of", "user", "info",
                  "direct", "current", "id", "ids", "day", "a", "in", "on", "with", "and"}

DEFAULTS = {
    "threshold": 0.5,          # flag when the ATE >= threshold (method sheet, default tau)
    "min_overlap": 10,         # content overlap: minimum common substring length (characters)
    "similarity": 0.6,         # content overlap: string similarity for fuzzy matches
    "instruction_threshold": 0.5,  # a segment of untrusted text is an injection candidate above this
    "leak": 0.05,              # noisy-OR leak of every action (beta_task of the repository's SCM)
    "max_depth": 50,           # slicing depth
    "max_frontier": 20,        # exact propagation keeps a joint over at most 2^20 frontier states
    "candidates": "untrusted",  # treatments: every untrusted span ("markers": instruction-like segments only)
    "answer_sink": False,      # the final answer counts as a sink of the verdict (off: it has no side effect)
    "support": "min",          # a call is explained by the task as far as its least explained value ("mean": the average)
}

# Confidence of each edge inference strategy (reconstructed; the paper's values are not known).
CONFIDENCE = {
    "taint": 0.95,             # (a) explicit taint tokens
    "produced": 1.0,           # a call -> the result it returned (its observation)
    "segment": 1.0,            # an observation -> a segment of its own text
    "overlap": 0.95,           # (d) a >= min_overlap substring of i's output in j's inputs
    "fuzzy": 0.8,              # (d) similarity >= threshold (scaled by the similarity)
    "delegation": 0.9,         # (c) orchestrator -> sub-agent
    "instruction": 0.95,       # trust_transfer: j's call pattern is spelled out in i's text
    "marked_overlap": 0.95,    # the same three out of an instruction-like segment (the weak feature:
    "marked_fuzzy": 0.8,       # the same prior, fitted apart by EM)
    "marked_instruction": 0.95,
    "named_overlap": 0.95,     # the same three out of an untrusted span whose source the task names
    "named_fuzzy": 0.8,        # (provenance: a flow from data the user pointed to; the same prior,
    "named_instruction": 0.95, # fitted apart by EM)
    "sequence": 0.9,           # (b) the trusted task -> a compatible action (scaled by support)
    "referenced": 0.9,         # the task -> an action whose values come from a source the task names
    "state": 0.9,              # state_enablement (login -> protected call); never a trigger
}


def confidence_table(table: dict | None = None) -> dict:
    """Every strategy's confidence: ``table`` over the prior :data:`CONFIDENCE`. A ``named_*`` strategy
    that ``table`` lacks while it has the plain one takes the plain one's value (a table fitted before
    the flows out of task-named sources were split off keeps its behaviour)."""
    t = {**CONFIDENCE, **(table or {})}
    for k in CONFIDENCE:
        if k.startswith("named_") and table and k not in table and k[6:] in table:
            t[k] = table[k[6:]]
    return t


def sink_category(function: str | None, table: dict[str, str] | None = None) -> str | None:
    """The sink category of a function name under ``table`` (regex -> category), or None."""
    if not function:
        return None
    if table is None or table is DEFAULT_SINKS:
        return _default_sink(function)
    name = function.lower()
    for pattern, cat in (table or DEFAULT_SINKS).items():
        if re.search(pattern, name):
            return cat
    return None


@lru_cache(maxsize=4096)
def _default_sink(function: str) -> str | None:
    return sink_category(function, {**DEFAULT_SINKS})


def load_sink_table(path: str) -> dict[str, str]:
    """Read a sink table (JSON or TOML mapping regex -> category); InputError naming the key if bad."""
    import tomllib

    from icmlkit.lib.core.errors import InputError
    from icmlkit.lib.core.io import display_name, open_text, parse_json, suffix

    with open_text(path) as fh:
        text = fh.read()
    if suffix(path) == ".json":
        data = parse_json(text, display_name(path), dict, "sink table (JSON)")
    else:
        try:
            data = tomllib.loads(text)
        except ValueError as exc:
            raise InputError(f"not a valid sink table (TOML: {exc})", display_name(path)) from None
    if not isinstance(data, dict) or not data:
        raise InputError("expected a non-empty mapping of regex -> category", display_name(path))
    for k, v in data.items():
        if not isinstance(v, str):
            raise InputError(f"field {k!r}: the category must be a string", display_name(path))
        try:
            re.compile(k)
        except re.error as exc:
            raise InputError(f"field {k!r}: not a regular expression ({exc})", display_name(path)) from None
    return dict(data)


# --------------------------------------------------------------------------- command settings
# One dataclass per subcommand of trace-injection; the command line declares their fields as
# options once (cli/_common.config_options), and the demo and the benchmark build them in code.

def _suites() -> list[str]:
    from icmlkit.lib.agentdojo import SUITES

    return list(SUITES)


THRESHOLD_HELP = {"help": "Flag a trace when its effect (ATE) is at least this.", "min": 0.0, "max": 1.0}
JUDGE_URL_HELP = {"help": "Base URL of an OpenAI-compatible endpoint for the optional LLM judge of "
                  "instruction-likeness (off by default; ambiguous pieces only)."}
INSTRUCTION_HELP = {"help": "A learned instruction score from `fit-instruction` (JSON): the SCM's "
                    "instruction-likeness input instead of the phrase heuristic (reconstructed; off by "
                    "default). Give the same file to fit, detect and eval."}


@dataclass
class ReadConfig:
    """How traces are read (every subcommand that reads traces)."""

    label: str = field(default="compromised", metadata={
        "help": "Label of recorded AgentDojo runs: compromised (attacked and security true) or attacked "
                "(an injection task present).", "choices": ("compromised", "attacked")})
    strict_ids: bool = field(default=False, metadata={
        "help": "Refuse tool results with an empty tool_call_id (default: pair them with the pending calls "
                "by position and count the repairs)."})


@dataclass
class DetectConfig:
    """Settings of ``detect`` and ``eval`` (the causal detector and the optional LLM judge).

    In ``eval``, ``threshold`` is the effect threshold of the default causal detector; a head
    loaded with ``--model`` brings its own."""

    threshold: float = field(default=DEFAULTS["threshold"], metadata=THRESHOLD_HELP)
    judge_url: str | None = field(default=None, metadata=JUDGE_URL_HELP)
    judge_model: str = field(default="default", metadata={"help": "Model name sent to the judge endpoint."})
    instruction_model: str | None = field(default=None, metadata=INSTRUCTION_HELP)
    online: bool = field(default=False, metadata={
        "help": "Online mode (detect only): score every sink call from the events before it, as a gate in an "
                "agent loop would; one record per call."})


@dataclass
class ExplainConfig:
    """Settings of ``explain``."""

    threshold: float = field(default=DEFAULTS["threshold"], metadata=THRESHOLD_HELP)
    format: str = field(default="text", metadata={
        "help": "text: the attack chain; dot/graphml/json: the typed graph.",
        "choices": ("text", "dot", "graphml", "json")})


@dataclass
class FitConfig:
    """Settings of ``fit``."""

    head: str = field(default="threshold", metadata={
        "help": "threshold: learn the effect threshold only; em: fit the SCM's edge confidences and leak by "
                "maximum likelihood (EM, hand-set values as the prior; reconstructed), then the threshold on "
                "P(compromised); logreg / forest: a learned head on the causal features.",
        "choices": ("threshold", "em", "logreg", "forest")})
    false_alarm_budget: float | None = field(default=None, metadata={
        "help": "A false-alarm budget (an operating point): the threshold maximises training macro-F1 among "
                "those that flag at most this share of the training runs with an injection that did not take "
                "(class N2; every negative when the traces carry no class). Default: no budget.",
        "min": 0.0, "max": 1.0})
    instruction_model: str | None = field(default=None, metadata=INSTRUCTION_HELP)


@dataclass
class InstructionConfig:
    """Settings of ``fit-instruction`` (the learned instruction score, :mod:`.instruct`)."""

    inverse_l2: float = field(default=1.0, metadata={
        "help": "C of the logistic regression on hashed n-grams (inverse L2 strength).", "min": 1e-6})


@dataclass
class GenerateConfig:
    """Settings of ``generate`` (labelled AgentDojo trajectories, replayed without any LLM)."""

    suites: list[str] = field(default_factory=_suites, metadata={
        "help": "Comma-separated AgentDojo suites (benchmark v1.2.2)."})
    max_pairs: int | None = field(default=None, metadata={
        "help": "Keep a seeded random subset of this many (user task, injection task) pairs per suite.", "min": 1})
    family: str = field(default="default", metadata={
        "help": "Attack templates: default (8 templates) or paraphrase (a held-out family of plain "
                "paraphrases, for testing unseen phrasings).", "choices": ("default", "paraphrase")})

    def check(self) -> None:
        known = _suites()
        names = [str(s).strip() for s in self.suites if str(s).strip()]
        bad = [s for s in names if s not in known]
        if bad or not names:
            raise UsageError(f"--suites: unknown suite(s) {bad}; choose from {', '.join(known)}")
        self.suites = names
        if self.max_pairs is not None and self.max_pairs < 1:
            raise UsageError("--max-pairs must be >= 1")
