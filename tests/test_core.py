"""The shared platform: runtime streams, checkpoints, manifests, io helpers and the cli/_common builders."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import click
import pytest

from icmlkit.cli._common import ToolGroup, add_demo, config_options, output_option, run_cli
from icmlkit.lib.core import checkpoint as ckpt
from icmlkit.lib.core.errors import InputError, UsageError
from icmlkit.lib.core.io import load_json, parse_json, read_jsonl, write_rows
from icmlkit.lib.core.manifest import is_secret_name, redact_argv
from icmlkit.lib.core.runtime import Dist, generator, seeded, stream_seed


# --------------------------------------------------------------------------- runtime


def test_named_streams_are_reproducible_and_independent():
    import torch

    a = torch.rand(5, generator=generator(3, "batches"))
    assert torch.equal(a, torch.rand(5, generator=generator(3, "batches")))
    assert not torch.equal(a, torch.rand(5, generator=generator(3, "noise")))
    assert not torch.equal(a, torch.rand(5, generator=generator(4, "batches")))
    assert stream_seed(7) == 7 and stream_seed(7, "x") != stream_seed(7, "y")
    assert 0 <= stream_seed(2**40, "x") < 2**63


def test_seeded_restores_the_callers_rng():
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with seeded(5, "init"):
        w1 = torch.nn.Linear(3, 2).weight.detach().clone()
    assert torch.equal(torch.rand(3), expected)  # the global stream went on as if nothing happened
    with seeded(5, "init"):
        w2 = torch.nn.Linear(3, 2).weight.detach().clone()
    assert torch.equal(w1, w2)


def test_dist_split_covers_the_batch_once():
    parts = [Dist(rank=r, world=4).split(8) for r in range(4)]
    assert [list(range(8))[p] for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(UsageError, match="does not split evenly"):
        Dist(rank=0, world=3).split(8)
    assert Dist().split(5) == slice(0, 5) and Dist().all_mean(2.5) == 2.5 and Dist().wrap("m") == "m"


# --------------------------------------------------------------------------- checkpoints


def _train(steps, ck=None, fp="fp"):
    import torch

    with seeded(0, "init"):
        model = torch.nn.Linear(4, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    g = generator(0, "batches")
    start, hist = 0, []
    state = ck.load(fp) if ck is not None else None
    if state is not None:
        start, extra = ckpt.restore(state, model=model, optimizer=opt, scheduler=sched, rng={"batches": g})
        hist = extra["hist"]
    x = torch.randn(32, 4, generator=generator(0, "data"))
    for step in range(start, steps):
        idx = torch.randint(0, 32, (8,), generator=g)
        loss = (model(x[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        hist.append(loss.item())
        if ck is not None and ck.due(step + 1, steps):
            ck.save(step + 1, fp, model=model, optimizer=opt, scheduler=sched, rng={"batches": g},
                    extra={"hist": hist})
        if ck is not None and step + 1 == 3 and not ck.resume:
            break  # "interrupted" after the checkpoint of step 2 and one more step
    return model.state_dict(), hist


def test_checkpoint_resume_gives_the_uninterrupted_weights(tmp_path):
    import torch

    full, hist = _train(6)
    path = tmp_path / "m.pt.ckpt.pt"
    _train(6, ckpt.Checkpointer(path, every=2))
    assert path.is_file()
    resumed, hist2 = _train(6, ckpt.Checkpointer(path, every=2, resume=True))
    assert all(torch.equal(full[k], resumed[k]) for k in full) and hist2 == hist
    with pytest.raises(UsageError, match="other settings"):
        _train(6, ckpt.Checkpointer(path, every=2, resume=True), fp="other")
    ckpt.Checkpointer(path).done()
    assert not path.exists()
    with pytest.raises(UsageError, match="nothing to resume"):
        ckpt.Checkpointer(path, resume=True)


def test_fingerprint_sees_settings_and_inputs():
    import numpy as np

    a = np.arange(4.0)
    fp = ckpt.fingerprint({"lr": 1e-3}, a)
    assert fp == ckpt.fingerprint({"lr": 1e-3}, a.copy())
    assert fp != ckpt.fingerprint({"lr": 2e-3}, a)
    assert fp != ckpt.fingerprint({"lr": 1e-3}, a + 1)
    assert fp != ckpt.fingerprint({"lr": 1e-3}, a.astype(np.float32))


def test_a_garbage_checkpoint_is_an_input_error(tmp_path):
    p = tmp_path / "x.ckpt.pt"
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="x.ckpt.pt"):
        ckpt.Checkpointer(p, resume=True).load("fp")


# --------------------------------------------------------------------------- io


def test_write_rows_by_suffix(tmp_path):
    import pandas as pd

    rows = [{"a": 1, "b": 0.1}, {"a": 2, "c": "x,y"}]
    write_rows(tmp_path / "t.csv", rows)
    assert (tmp_path / "t.csv").read_text() == 'a,b,c\n1,0.1,\n2,,"x,y"\n'
    write_rows(tmp_path / "t.jsonl", rows)
    back = [r for _, r in read_jsonl(tmp_path / "t.jsonl")]
    assert back == [{"a": 1, "b": 0.1, "c": None}, {"a": 2, "b": None, "c": "x,y"}]
    write_rows(tmp_path / "t.parquet", rows, columns=["a", "b"])
    assert pd.read_parquet(tmp_path / "t.parquet")["a"].tolist() == [1, 2]
    with pytest.raises(InputError, match="t.txt"):
        write_rows(tmp_path / "t.txt", rows)
    assert not (tmp_path / "t.txt").exists()


def test_json_errors_have_one_wording(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"a": 1,\n "b": ')
    with pytest.raises(InputError, match=r"c.json, line 2: not valid JSON \(Expecting value, column"):
        load_json(p)
    p.write_text("[1, 2]")
    with pytest.raises(InputError, match="expected an object at the top level"):
        load_json(p, expect=dict)
    assert load_json(p, expect=list) == [1, 2]
    with pytest.raises(InputError, match="no such file"):
        load_json(tmp_path / "none.json")
    with pytest.raises(InputError, match="x.jsonl, line 3: not valid JSON"):
        parse_json("{", "x.jsonl", dict, line=3)
    q = tmp_path / "r.jsonl"
    q.write_text('{"a": 1}\n\n[2]\n')
    with pytest.raises(InputError, match="r.jsonl, line 3: expected an object"):
        read_jsonl(q)


# --------------------------------------------------------------------------- manifest secrets


@pytest.mark.parametrize("name", ["key", "api_key", "token", "password", "secret", "hf_token", "--openai-key",
                                  "--api-key", "--hf-token"])
def test_secret_option_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["monkey", "tokens", "max_new_tokens", "keyword", "api_key_env", "top_k",
                                  "monkey_tokens.npz", "--key-file-path"])
def test_not_secret_option_names(name):
    assert not is_secret_name(name)


def test_argv_redaction_by_flag_never_by_path():
    argv = ["run", "monkey_tokens.npz", "--api-key", "sk-123", "--hf-token=abc", "-o", "keys.csv"]
    assert redact_argv(argv) == ["run", "monkey_tokens.npz", "--api-key", "<redacted>", "--hf-token=<redacted>",
                                 "-o", "keys.csv"]


# --------------------------------------------------------------------------- cli builders


@dataclass
class _Cfg:
    steps: int = field(default=10, metadata={"help": "Steps.", "min": 1})
    lr: float = field(default=0.1, metadata={"help": "Learning rate."})
    mode: str = field(default="a", metadata={"help": "Mode.", "choices": ("a", "b")})
    fast: bool = field(default=False, metadata={"help": "Go fast."})
    limit: float | None = field(default=None, metadata={"help": "Optional limit."})
    eps: tuple = field(default=(0.1, 0.2), metadata={"help": "Range."})

    def check(self):
        if self.lr <= 0:
            raise UsageError("--lr must be > 0")


def _toy_group():
    grp = ToolGroup("toy-tool", help="A toy.\n\nExample: toy-tool fit in.txt -o out.json")

    @grp.command(device=False)
    @click.argument("data")
    @output_option("The result.", suffixes=(".json",), stdout=False)
    @click.option("--api-key", default=None, help="A secret.")
    @config_options(_Cfg)
    def fit(run, data, output, api_key, cfg):
        """Fit.  JSON keys: steps."""
        run.input(data)
        run.output(output)
        if output:
            run.save(output, lambda p, obj: open(p, "w").write(json.dumps(obj)), {"cfg": repr(cfg)})
        return {"steps": cfg.steps, "cfg": repr(cfg)}

    @grp.command(device=True)
    def uses(run):
        """Uses the device. JSON keys: device."""
        return {"device": str(run.device)}

    add_demo(grp, "tests.test_core:_demo_runner", doc="Demo. JSON keys: headline, outdir.",
             options=[click.option("--n", default=2, type=int)])
    return grp


def _demo_runner(folder, *, seed, n):
    (folder / "x.txt").write_text(str(n))
    return {"headline": f"n={n} seed={seed}"}


def _run(capsys, *argv):
    capsys.readouterr()
    code = run_cli(_toy_group(), "toy-tool", list(map(str, argv)))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_config_options_build_the_dataclass(tmp_path, capsys):
    data = tmp_path / "monkey_tokens.npz"
    data.write_text("x")
    out = tmp_path / "o.json"
    code, stdout, err = _run(capsys, "fit", data, "-o", out, "--steps", 3, "--mode", "b", "--fast",
                             "--eps", "0.3,0.4", "--api-key", "sk-9", "--json")
    assert code == 0, err
    s = json.loads(stdout)
    assert s["cfg"] == "_Cfg(steps=3, lr=0.1, mode='b', fast=True, limit=None, eps=(0.3, 0.4))"
    man = json.loads((tmp_path / "o.json.manifest.json").read_text())
    assert man["parameters"]["api_key"] == "<redacted>" and "sk-9" not in json.dumps(man)
    assert man["inputs"][0]["path"].endswith("monkey_tokens.npz") and str(data) in man["argv"]
    assert man["parameter_sources"]["steps"] == "flag" and man["parameter_sources"]["lr"] == "default"
    assert man["device"] is None and "device" not in man["parameters"]
    for bad in (["--steps", 0], ["--mode", "c"], ["--lr", -1], ["--eps", "x"]):
        code, _, err = _run(capsys, "fit", data, *bad)
        assert code == 2, (bad, err)
    code, _, err = _run(capsys, "fit", data, "--lr", -1)
    assert "--lr must be > 0" in err


def test_output_option_one_wording(tmp_path, capsys):
    data = tmp_path / "d.txt"
    data.write_text("x")
    code, _, err = _run(capsys, "fit", data, "-o", tmp_path / "o.csv")
    assert code == 2 and "expected a .json file" in err
    code, _, err = _run(capsys, "fit", data, "-o", "-")
    assert code == 2 and "stdout" in err
    code, _, err = _run(capsys, "demo", "--outdir", "-")
    assert code == 2 and "name a folder" in err


def test_device_only_where_declared(capsys):
    code, _, err = _run(capsys, "fit", "x", "--device", "cpu")
    assert code == 2 and "No such option" in err
    code, out, _ = _run(capsys, "uses", "--device", "cpu", "--json")
    assert code == 0 and json.loads(out)["device"] == "cpu"
    import torch

    if not torch.cuda.is_available():
        code, _, err = _run(capsys, "uses", "--device", "cuda")
        assert code == 4 and "no GPU" in err


def test_demo_builder(tmp_path, capsys):
    code, out, err = _run(capsys, "demo", "--outdir", tmp_path / "d", "--n", 5, "--seed", 2, "--json")
    assert code == 0, err
    assert json.loads(out)["headline"] == "n=5 seed=2"
    assert (tmp_path / "d" / "x.txt").read_text() == "5" and (tmp_path / "d" / "manifest.json").is_file()


def test_config_table_typo_is_a_usage_error(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[fti]\nsteps = 3\n")
    code, _, err = _run(capsys, "fit", "x", "--config", cfg)
    assert code == 2 and "unknown table [fti]" in err
    cfg.write_text("[fit]\nsteps = 3\n")
    code, out, err = _run(capsys, "fit", "x", "--config", cfg, "--json")
    assert code == 0 and json.loads(out)["steps"] == 3


def test_safetensors_writer_is_deterministic_and_loads_in_the_package(tmp_path):
    import numpy as np
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    from icmlkit.lib.core.io import read_safetensors, safetensors_bytes, write_safetensors

    tensors = {"w": torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), "b": np.arange(5),
               "mask": np.array([True, False]), "d": torch.ones(2, dtype=torch.float64),
               "scalar": torch.tensor(0.5), "np_scalar": np.float32(2.0)}
    meta = {"format": "t/1", "z": "2", "a": "1"}
    p = tmp_path / "m.safetensors"
    write_safetensors(p, tensors, meta)
    assert p.read_bytes() == safetensors_bytes(dict(reversed(list(tensors.items()))), dict(reversed(list(meta.items()))))
    theirs = load_file(p)
    assert torch.equal(theirs["w"], tensors["w"]) and theirs["b"].dtype == torch.int64 and theirs["mask"].dtype == torch.bool
    with safe_open(str(p), framework="pt") as fh:
        assert fh.metadata() == meta
    ours, back = read_safetensors(p, "t/1")
    assert back == meta and np.array_equal(ours["w"], tensors["w"].numpy()) and ours["d"].dtype == np.float64
    assert ours["scalar"].shape == () and theirs["scalar"].shape == () and ours["np_scalar"].shape == ()
    with pytest.raises(InputError, match="format 't/1', expected 'other'"):
        read_safetensors(p, "other", what="model file")
    p.write_bytes(p.read_bytes()[:-8])
    with pytest.raises(InputError, match="truncated"):
        read_safetensors(p)
    with pytest.raises(TypeError, match="cannot store tensor 'x' of dtype torch.bfloat16"):
        safetensors_bytes({"x": torch.ones(2, dtype=torch.bfloat16)})


@pytest.mark.parametrize("kind", ["garbage", "empty", "truncated", "pickled", "json"])
def test_load_torch_gives_one_line_for_every_bad_file(kind, tmp_path):
    """Garbage, empty, truncated, pickled-object and JSON files: one line naming the file and the
    problem, none of PyTorch's own text ("pop from empty list", "Weights only load failed", zip errors)."""
    import io
    import os

    import torch

    from icmlkit.lib.core.io import load_torch

    buf = io.BytesIO()
    torch.save({"a": torch.ones(3)}, buf)
    good = buf.getvalue()
    pickled = io.BytesIO()
    torch.save({"a": InputError("x", "y")}, pickled)
    data = {"garbage": os.urandom(300), "empty": b"", "truncated": good[: len(good) // 2],
            "pickled": pickled.getvalue(), "json": b'{"a": [1,'}[kind]
    path = tmp_path / f"{kind}.pt"
    path.write_bytes(data)
    with pytest.raises(InputError) as err:
        load_torch(path, "model file")
    msg = str(err.value)
    assert "\n" not in msg and f"{kind}.pt: not a model file: " in msg
    expected = "weights-only loading refuses" if kind == "pickled" else "not a torch file, or a truncated one"
    assert expected in msg and "Weights only" not in msg and "pop from" not in msg
    path.write_bytes(good)
    assert torch.equal(load_torch(path, "model file")["a"], torch.ones(3))


def _threads_group():
    grp = ToolGroup("toy-threads")

    @grp.command()
    @output_option("The result.", suffixes=(".json",), stdout=False)
    def count(run, output):
        """Torch's thread count inside the command. JSON keys: threads."""
        import torch

        run.output(output)
        if output:
            run.save(output, lambda p, obj: open(p, "w").write(json.dumps(obj)), {})
        return {"threads": torch.get_num_threads()}

    return grp


def test_threads_option_applies_before_torch_work_and_is_recorded(tmp_path, capsys, monkeypatch):
    """--threads (flag > ICMLKIT_THREADS > default 1) sets torch's intra-op threads for the command,
    restores the caller's count afterwards, and is recorded in the manifest."""
    import torch

    before = torch.get_num_threads()

    def run(*argv):
        capsys.readouterr()
        code = run_cli(_threads_group(), "toy-threads", ["count", *map(str, argv), "--json"])
        cap = capsys.readouterr()
        assert code == 0, cap.err
        return json.loads(cap.out)["threads"]

    assert run() == 1  # the documented default
    assert run("--threads", 2) == 2
    monkeypatch.setenv("ICMLKIT_THREADS", "2")
    assert run() == 2 and run("--threads", 1) == 1
    monkeypatch.delenv("ICMLKIT_THREADS")
    from icmlkit.lib.core.runtime import cpu_count

    assert run("--threads", 0) == cpu_count()
    assert torch.get_num_threads() == before
    out = tmp_path / "o.json"
    run("-o", out, "--threads", 2)
    man = json.loads((tmp_path / "o.json.manifest.json").read_text())
    assert man["threads"] == 2 and man["parameters"]["threads"] == 2
    capsys.readouterr()
    assert run_cli(_threads_group(), "toy-threads", ["count", "--threads", "-1"]) == 2


def test_threads_reach_torch_imported_during_the_run(tmp_path):
    """In a fresh process torch is imported inside the command: the count still applies."""
    import subprocess
    import sys

    code = ("import json, sys; from tests.test_core import _threads_group; from icmlkit.cli._common import run_cli; "
            "sys.exit(run_cli(_threads_group(), 't', ['count', '--json', '--threads', '1']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]),
                       env={**__import__("os").environ, "PYTHONPATH": "."}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["threads"] == 1


class _FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_progress_lines_off_a_terminal_with_a_fake_clock(monkeypatch, capsys):
    """Off a terminal: no bar, one line per LINE_EVERY seconds (steps, the reported loss, elapsed,
    time left) and a closing line; a loop shorter than the interval stays silent; -q silences it."""
    from icmlkit.lib.core import console

    clock = _FakeClock()
    monkeypatch.setitem(console._state, "clock", clock)
    monkeypatch.setattr(console, "_WATCH_POLL", 3600.0)  # the watcher thread stays out of this test
    console.configure(0, progress=True)
    capsys.readouterr()
    for i in console.progress(range(10), desc="train toy"):
        console.report(loss=1.0 / (i + 1))
        clock.t += 25.0  # a step of 25 s
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    # 250 s of work: lines after steps 3 (75 s), 6 (150 s), 9 (225 s), then the closing line
    assert len(lines) == 4, err
    assert lines[0] == "train toy: step 3/10 (30%), loss 0.3333, 1m15s elapsed, ~2m55s left"
    assert lines[-1] == "train toy: done, step 10/10, loss 0.1, 4m10s elapsed"
    assert "\r" not in err and "it/s" not in err  # no bar
    for _ in console.progress(range(10), desc="short"):
        clock.t += 1.0
    assert capsys.readouterr().err == ""
    console.configure(-1, progress=True)
    for _ in console.progress(range(5), desc="quiet"):
        clock.t += 100.0
    assert capsys.readouterr().err == ""
    console.configure(0, progress=True)


def test_progress_line_comes_while_one_step_runs_long(monkeypatch, capsys):
    """The watcher thread writes the line even when a single step outlasts the interval."""
    import threading

    from icmlkit.lib.core import console

    clock = _FakeClock()
    monkeypatch.setitem(console._state, "clock", clock)
    monkeypatch.setattr(console, "_WATCH_POLL", 0.01)
    console.configure(0, progress=True)
    capsys.readouterr()
    wrote = threading.Event()
    real_info = console.log.info
    monkeypatch.setattr(console.log, "info", lambda msg: (real_info(msg), wrote.set()))
    for _ in console.progress(range(1), desc="slow step"):
        clock.t += 61.0  # the step is now past the interval; the thread must notice without a new step
        assert wrote.wait(30), "no progress line while the step ran"
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("slow step: step 0/1 (0%), 1m01s elapsed")


def test_a_prefix_of_a_flag_suggests_that_flag(capsys):
    """click alone suggests by spelling (distill-agent make-env --n got '--json'); a flag's prefix
    suggests the flag it begins."""
    code, _, err = _run(capsys, "fit", "x", "--st", "3")
    assert code == 2 and "Did you mean '--steps'?" in err
    code, _, err = _run(capsys, "fit", "x", "--overw")
    assert code == 2 and "Did you mean '--overwrite'?" in err
    code, _, err = _run(capsys, "fit", "x", "--jsn")
    assert code == 2 and "'--json'" in err  # not a prefix: click's spelling matches
    from icmlkit.cli.distill_agent import cli

    capsys.readouterr()
    assert run_cli(cli, "distill-agent", ["make-env", "--n", "3"]) == 2
    assert "Did you mean '--n-tasks'?" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["garbage", "empty", "truncated", "pickled", "npy", "json"])
def test_load_npz_and_npy_give_one_line_for_every_bad_file(kind, tmp_path):
    """numpy's own text ("contains pickled (object) data ... allow_pickle=", "Object arrays cannot be
    loaded when allow_pickle=False") never reaches the user: one line naming the file and the problem."""
    import io
    import os

    import numpy as np

    from icmlkit.lib.core.io import load_npy, load_npz

    good = io.BytesIO()
    np.savez(good, a=np.arange(3.0))
    pickled = io.BytesIO()
    np.savez(pickled, a=np.array([{"x": 1}], dtype=object))
    npy = io.BytesIO()
    np.save(npy, np.array([{"x": 1}], dtype=object))
    data = {"garbage": os.urandom(300), "empty": b"", "truncated": good.getvalue()[:60],
            "pickled": pickled.getvalue(), "npy": npy.getvalue(), "json": b'{"a": [1,'}[kind]
    for reader, name in ((load_npz, "x.npz"), (load_npy, "x.npy")):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(InputError) as err:
            reader(path)
        msg = str(err.value)
        assert msg.startswith(f"{path}: ") and "\n" not in msg, msg
        assert "allow_pickle" not in msg and "pickled (object) data" not in msg and len(msg) < 300, msg
        if kind in ("pickled", "npy") and (reader is load_npy) == (kind == "npy"):
            assert "pickled Python objects" in msg, msg
    path = tmp_path / "ok.npz"
    path.write_bytes(good.getvalue())
    assert load_npz(path, required=("a",))["a"].tolist() == [0.0, 1.0, 2.0]


def _bar_group():
    grp = ToolGroup("toy-bars")

    @grp.command(seed=False)
    def bar(run):
        """A library's own tqdm bar, imported inside the command. JSON keys: n."""
        from tqdm import tqdm

        return {"n": sum(1 for _ in tqdm(range(50), desc="library bar"))}

    return grp


def test_library_bars_stay_off_a_terminal(tmp_path):
    """Off a terminal (cron, a log) a library's tqdm bar (transformers' "Writing model shards") draws
    nothing; the command still runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from tests.test_core import _bar_group; from icmlkit.cli._common import run_cli; "
            "sys.exit(run_cli(_bar_group(), 't', ['bar', '--json']))")
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "ICMLKIT_NO_PROGRESS")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=str(Path(__file__).parents[1]), env={**env, "PYTHONPATH": "."})
    assert r.returncode == 0 and json.loads(r.stdout)["n"] == 50, r.stderr
    assert r.stderr == "", r.stderr


def test_number_list_parses_and_refuses_naming_the_flag():
    from icmlkit.lib.core.config import number_list
    from icmlkit.lib.core.errors import UsageError

    assert number_list("1, 2.5,", "--x") == [1.0, 2.5]
    assert number_list((3, 4), "--x", int) == [3, 4]
    for bad, kw in (("a,1", {}), ("", {}), ("1,0", {"positive": True})):
        with pytest.raises(UsageError, match="--x"):
            number_list(bad, "--x", **kw)


def test_long_lived_inputs_freezes_and_restores_the_heap():
    import gc

    from icmlkit.lib.core.runtime import long_lived_inputs

    assert gc.get_freeze_count() == 0
    with long_lived_inputs():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a caller's own freeze (before a fork) is left as it was
    try:
        n = gc.get_freeze_count()
        with long_lived_inputs():
            pass
        assert gc.get_freeze_count() == n
    finally:
        gc.unfreeze()
