"""The online gate inside an AgentDojo agent (``agentdojo`` package, the ``trace`` extra): a pipeline
element that scores every tool call of the last assistant turn *before* it executes and aborts the run
(AgentDojo's ``AbortAgentError``, which its suite runner records as the end of the run) when a call's
score reaches the threshold. Place it in the tools loop before ``ToolsExecutor``::

    ToolsExecutionLoop([TraceGateElement(), ToolsExecutor(), llm])

The messages seen so far are read as a trajectory (:func:`.readers.from_messages`) and fed to one
:class:`.detect.Gate` per run, event by event (the prefix graph grows incrementally); a run is
recognised by its message list growing, and a shorter list starts a new one. Frameworks other than
AgentDojo use :class:`.detect.Gate` directly (a plain Python object: ``observe`` the task and tool
outputs, ``check_call`` each call). ``agentdojo.agent_pipeline`` is imported only when the element is
built (it pulls in the vendor SDKs)."""
from __future__ import annotations

from icmlkit.lib.trace_injection.detect import Gate


def _plain(messages) -> list[dict]:
    """AgentDojo chat messages (typed dicts, FunctionCall objects) as the message format of the reader."""
    out = []
    for m in messages:
        d = {"role": m["role"], "content": m.get("content") or ""}
        calls = m.get("tool_calls") or []
        if calls:
            d["tool_calls"] = [{"id": c.id or f"call{k}", "function": c.function, "args": dict(c.args)}
                               for k, c in enumerate(calls)]
        if m["role"] == "tool":
            tc = m.get("tool_call")
            d["tool_call_id"] = m.get("tool_call_id") or (tc.id if tc is not None else None)
            d["function"] = tc.function if tc is not None else None
        out.append(d)
    return out


def make_element(params: dict | None = None, sinks: dict | None = None, score_key: str = "effect"):
    """A ``BasePipelineElement`` that gates tool calls (see the module doc). ``params``: the analysis
    settings and ``threshold`` (an EM fit's ``confidence``/``leak`` with ``score_key="p_compromised"``).
    The element's ``decisions`` list keeps every decision of the current run."""
    from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
    from agentdojo.agent_pipeline.errors import AbortAgentError

    from icmlkit.lib.trace_injection.readers import ReadOptions, _Where, from_messages

    class TraceGateElement(BasePipelineElement):
        name = "trace_injection_gate"

        def __init__(self):
            self.gate, self.fed, self.seen, self.decisions = None, 0, 0, []

        def query(self, query, runtime, env=None, messages=(), extra_args=None):
            extra_args = {} if extra_args is None else extra_args
            msgs = list(messages)
            if not msgs or msgs[-1]["role"] != "assistant" or not msgs[-1].get("tool_calls"):
                return query, runtime, env, messages, extra_args
            if self.gate is None or len(msgs) < self.seen:
                self.gate, self.fed, self.decisions = Gate(params, sinks, None, score_key, trace_id="agentdojo"), 0, []
            self.seen = len(msgs)
            trace = from_messages(_plain(msgs), "agentdojo", _Where("agentdojo", opts=ReadOptions()))
            for ev in trace.events[self.fed:]:
                d = self.gate.step(ev)
                self.fed += 1
                if d is not None:
                    self.decisions.append(d)
                    if d["blocked"]:
                        raise AbortAgentError(f"trace-injection gate blocked {d['function']} (score {d['score']:.3f})",
                                              msgs, env)
            return query, runtime, env, messages, extra_args

    return TraceGateElement()
