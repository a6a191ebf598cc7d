"""The trajectory schema CausalTrace works on: a trace is an ordered list of events.

Readers (``readers.py``) turn CausalBench JSON, AgentDojo-style message lists and generic JSONL
steps into :class:`Trace`. Labels and ground truth (``is_attack``, ``class``, the known attack
chain, ``is_injection_source``) go to ``Trace.meta`` and are never read by the detector.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("TASK", "OBSERVATION", "LLM_CALL", "ACTION")


@dataclass
class Event:
    """One event of a trajectory (Step 1 makes one graph node per event)."""

    id: str
    kind: str                      # TASK | OBSERVATION | LLM_CALL | ACTION
    trusted: bool                  # trust domain: trusted user/system vs untrusted external content
    text: str = ""                 # the content: task prompt, tool output, answer text
    function: str | None = None    # called function / endpoint for ACTION events
    args: dict = field(default_factory=dict)
    produced: tuple = ()           # explicit taint tokens (opaque ids of data items)
    consumed: tuple = ()
    parent_call: str | None = None  # the ACTION that returned this OBSERVATION
    agent: str | None = None       # for delegation between agents
    service: str | None = None
    index: int = 0                 # position in the source (message index / step / event order)


@dataclass
class Trace:
    id: str
    events: list
    meta: dict = field(default_factory=dict)   # labels and ground truth: never used by the detector
    source: str = ""                           # file name for messages

    @property
    def label(self) -> int | None:
        v = self.meta.get("label")
        return None if v is None else int(bool(v))
