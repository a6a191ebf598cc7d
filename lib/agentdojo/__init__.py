"""Reading the AgentDojo task suites, shared by the tools that use them (trace-injection's labelled
trajectories, design-safe-agents' ``agentdojo:SUITE`` environments).

- :data:`BENCHMARK_VERSION`, :data:`SUITES`: the benchmark version and its four suites;
- :func:`load_suites`: the suites of a version, importing agentdojo's task-suite code without its
  LLM-pipeline package (which imports every vendor SDK);
- :func:`ordered_tasks`: a suite's user or injection tasks in the order of their numbers;
- :func:`jsonable`: a ground-truth call's arguments as JSON values.

The agentdojo package (MIT, 0.1.35) is an optional extra; importing this module does not import it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types

from icmlkit.lib.core.errors import EnvironmentProblem

BENCHMARK_VERSION = "v1.2.2"
SUITES = ("workspace", "travel", "banking", "slack")
INSTALL = "pip install 'icmlkit[trace-injection]' (or pip install agentdojo==0.1.35)"


def _stub_pipeline_package() -> types.ModuleType | None:
    """Import agentdojo.task_suite without running agentdojo/agent_pipeline/__init__.py (which imports
    every LLM vendor SDK): register a stand-in package whose __path__ is the real folder. Returns the
    stand-in (None when the real package is already imported)."""
    if "agentdojo.agent_pipeline" in sys.modules:
        return None
    spec = importlib.util.find_spec("agentdojo")
    if spec is None or spec.origin is None:
        raise EnvironmentProblem(f"agentdojo is not installed; install it with: {INSTALL}")
    stub = types.ModuleType("agentdojo.agent_pipeline")
    stub.__path__ = [os.path.join(os.path.dirname(spec.origin), "agent_pipeline")]
    sys.modules["agentdojo.agent_pipeline"] = stub
    return stub


def load_suites(version: str = BENCHMARK_VERSION) -> dict:
    """AgentDojo's task suites of ``version`` (name -> TaskSuite); exit 4 with the install hint without
    a usable agentdojo."""
    stub = _stub_pipeline_package()
    try:
        from agentdojo.task_suite.load_suites import get_suites
    except ImportError as exc:
        raise EnvironmentProblem(f"agentdojo is not usable ({exc}); install it with: {INSTALL}") from None
    finally:
        # the stand-in served the task-suite imports; a later ``import agentdojo.agent_pipeline``
        # (an agent pipeline in the same process) must get the real package and its names
        if stub is not None and sys.modules.get("agentdojo.agent_pipeline") is stub:
            del sys.modules["agentdojo.agent_pipeline"]
    return get_suites(version)


def task_number(task_id: str) -> int:
    """The number at the end of a task id (``user_task_12`` -> 12; 0 without one)."""
    tail = task_id.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def ordered_tasks(tasks: dict) -> list[tuple[str, object]]:
    """A suite's ``user_tasks`` or ``injection_tasks`` as (id, task) in the order of their numbers."""
    return sorted(tasks.items(), key=lambda kv: task_number(kv[0]))


def jsonable(v):
    """A tool call's arguments as JSON values (anything else as its str)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)
