"""The Python sandbox of the agent: code cells run in a separate, isolated Python process.

- One worker process per episode (``python -I``, empty environment, a temporary working folder),
  with an address-space limit (``RLIMIT_AS``) and a CPU-time limit; variables persist between the
  cells of one episode, as in the upstream code agent.
- ``final_answer_print(x)`` prints ``x`` and ends the episode; ``web_search(q)`` answers from a
  pluggable table (``{query: text}``; offline by default it says that search is unavailable).
- A cell that runs past ``timeout`` seconds is killed with its process: the step's observation is an
  error, a fresh worker is started and the earlier successful cells are replayed (their output
  discarded) so the episode continues [reconstructed: the upstream executor's recovery is not given].
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time

WORKER = r'''
import sys, json, io, contextlib, traceback, resource
lim = json.loads(sys.argv[1])
if lim["mem"] > 0:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (lim["mem"], lim["mem"]))
    except (ValueError, OSError):
        pass
SEARCH = lim.get("search") or {}
class _Final(Exception):
    pass
FINAL = []
def final_answer_print(*args):
    text = " ".join(str(a) for a in args)
    print(text)
    FINAL.append(text)
    if lim.get("final_raises", True):
        raise _Final()
def web_search(query, *a, **k):
    q = str(query)
    if q in SEARCH:
        return SEARCH[q]
    return "web_search is unavailable in this sandbox (no search table given)"
ns = {"__name__": "__main__", "final_answer_print": final_answer_print, "web_search": web_search}
out_stream = sys.stdout
sys.stdin = open("/dev/null")
for line in iter(sys.__stdin__.readline, ""):
    req = json.loads(line)
    lim["final_raises"] = req.get("allow_final", True)
    FINAL.clear()
    buf = io.StringIO()
    err = None
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            exec(compile(req["code"], "<code>", "exec"), ns)
        except _Final:
            pass
        except MemoryError:
            err = "MemoryError: the step ran out of memory"
        except BaseException as exc:
            tb = traceback.format_exception_only(type(exc), exc)
            err = "".join(tb).strip()
    text = buf.getvalue()
    if err:
        text = (text + "\n" if text else "") + "Error: " + err
    out_stream.write(json.dumps({"out": text[-4000:], "final": FINAL[0] if FINAL else None, "ok": err is None}) + "\n")
    out_stream.flush()
'''


class PythonSandbox:
    """``run(code) -> (observation, final)``; ``final`` is the text passed to final_answer_print."""

    def __init__(self, timeout: float = 10.0, memory_mb: int = 1024, search: dict | None = None):
        self.timeout = float(timeout)
        self.memory = int(memory_mb) * (1 << 20)
        self.search = dict(search or {})
        self.cells: list[str] = []
        self.proc = None
        self._tmp = tempfile.TemporaryDirectory(prefix="icmlkit-sandbox-")
        self.timeouts = 0

    def _start(self):
        lim = json.dumps({"mem": self.memory, "search": self.search})
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", WORKER, lim], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self._tmp.name,
                                     env=env, text=True, bufsize=1)
        for c in self.cells:  # replay the episode's earlier cells
            self._exec(c, allow_final=False, timeout=self.timeout)

    def _exec(self, code: str, allow_final: bool, timeout: float):
        assert self.proc is not None
        try:
            self.proc.stdin.write(json.dumps({"code": code, "allow_final": allow_final}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill()
            return None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                line = self.proc.stdout.readline()
                if not line:
                    return None
                try:
                    return json.loads(line)
                except ValueError:
                    return None

    def _kill(self):
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        self.proc = None

    def run(self, code: str, allow_final: bool = True):
        if self.proc is None:
            self._start()
        res = self._exec(code, allow_final, self.timeout)
        if res is None:  # timed out or the worker died (memory): kill the step, keep the episode
            died = self.proc is not None and self.proc.poll() is not None
            self._kill()
            self.timeouts += 1
            why = "the worker died (memory limit?)" if died else f"timed out after {self.timeout:g} s"
            return f"Error: the step {why}; it was stopped", None
        if res.get("ok"):
            self.cells.append(code)
        return (res.get("out") or "").strip() or "(no output)", res.get("final")

    def close(self):
        self._kill()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
