"""The Flower engine (flwr 1.42 Message API; optional extra ``icmlkit[fed-stream-flower]``).

- ClientApp (``@app.train()``): client k = ``context.node_config["partition-id"]`` loads the
  stream (its own rows), reads its buffer from ``context.state`` (a RecordDict that survives
  between executions of the same ClientApp on the same node, in Simulation and Deployment
  engines; with ``state-dir`` set, also a local file, because a restarted SuperNode loses its
  state), runs the same round as the in-process engine (:func:`~icmlkit.lib.fed_stream.client.client_round`:
  oracle forecast from histograms, buffer rule / DDS, E local epochs) and replies with its
  weights and a MetricRecord (``num-examples``, ``saw-weight`` = n_eff * exp(-gamma d), the
  residual TV, the fresh fraction).
- ServerApp: :class:`SAWFedAvg`, a ``flwr.serverapp.strategy.FedAvg`` subclass whose
  ``aggregate_train`` computes the floored, normalised SAW weights (or FedAvg's n_k) from the
  replies with the same function as the in-process engine [SAW reconstructed], then the weighted
  average; ``evaluate_fn`` scores the global model on every client's exact distribution.
- ``--engine flower-sim``: :func:`run_flower_sim` (``flwr.simulation.run_simulation``, one
  SuperNode per client). ``export-flower DIR``: :func:`export_app` writes a Flower app that
  ``flwr run`` launches on the Deployment Engine.

flwr is not installed in the project's main environment (it downgrades rich/typer/packaging);
this path was run in a separate venv with flwr 1.42.0 + ray 2.55.1, where ``--engine flower-sim``
reproduced the in-process engine's buffers and weights exactly (tests marked slow, skipped
without flwr). The exported app was launched by hand in that venv (2026-12-02, a 3-client stream,
3 rounds): ``flwr run . local-simulation`` and the Deployment Engine on one machine (one
``flower-superlink``, three ``flower-supernode``; insecure, then TLS with a self-signed CA, then TLS
with SuperNode authentication) gave the same final per-group accuracies. icmlkit is not on a
package index, so the SuperLink and SuperNodes run with runtime dependency installation disabled
in an environment that has ``icmlkit[fed-stream-flower]`` installed.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from icmlkit.lib.core.errors import require_module
from icmlkit.lib.core.io import write_text

_STREAMS: dict = {}


def _flwr():
    return require_module("flwr", "fed-stream-flower", "flwr[simulation]==1.42.*")


def _stream(path: str):
    from icmlkit.lib.fed_stream.streams import read_stream

    if path not in _STREAMS:
        _STREAMS[path] = read_stream(path)
    return _STREAMS[path]


def _run_cfg(text: str):
    from icmlkit.lib.fed_stream.config import RunConfig

    return RunConfig(**json.loads(text))


def client_train(msg, context):
    """The ClientApp's train handler (one client, one round)."""
    import torch
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    from icmlkit.lib.fed_stream.client import ClientState, batch_plan, client_round
    from icmlkit.lib.fed_stream.models import build_model, local_train
    from icmlkit.lib.fed_stream.oracles import make_oracle
    from icmlkit.lib.fed_stream.sim import buffer_size, checked_oracle, forecasts, observed_histograms

    conf = msg.content["config"]
    cfg = _run_cfg(conf["run-config"])
    seed, t = int(conf["seed"]), int(conf["period"])
    k = int(context.node_config["partition-id"])
    stream = _stream(conf["stream-path"])
    cfg, _ = checked_oracle(cfg, stream, seed)  # --oracle auto, and the known-future rule
    K = stream.clients
    M = buffer_size(cfg, stream)
    oracle = make_oracle(cfg.oracle, seed=seed)
    fc = forecasts(oracle, stream, t, observed_histograms(stream), np.array([k]))[0]
    # the buffer: context.state, else the local state file (deployment), else empty
    state_dir = str(conf.get("state-dir", "") or "")
    st = ClientState.empty()
    if "fedstream" in context.state:
        rec = context.state["fedstream"]
        st = ClientState(np.frombuffer(rec["buffer"], dtype=np.int64).copy(), int(rec["seen"]), float(rec["seen-eff"]))
    elif state_dir and (Path(state_dir) / f"client-{k}.npz").is_file():
        z = np.load(Path(state_dir) / f"client-{k}.npz", allow_pickle=False)
        st = ClientState(z["buffer"].astype(np.int64), int(z["seen"]), float(z["seen_eff"]))
    starts = np.searchsorted(stream.period * K + stream.client, np.arange(K * stream.periods + 1))
    new = np.arange(starts[t * K + k], starts[t * K + k + 1])
    st, train, w, stats = client_round(cfg.strategy, st, new, stream.group, stream.period, fc, t, cfg, M, seed, k)
    context.state["fedstream"] = ConfigRecord({"buffer": st.buffer.astype(np.int64).tobytes(), "seen": int(st.seen),
                                               "seen-eff": float(st.seen_eff)})
    if state_dir:
        os.makedirs(state_dir, exist_ok=True)
        np.savez(Path(state_dir) / f"client-{k}.npz", buffer=st.buffer, seen=st.seen, seen_eff=st.seen_eff)
    model = build_model(cfg.model, stream.dim, stream.n_classes, seed)
    gparams = {name: v.to(torch.float32) for name, v in msg.content["arrays"].to_torch_state_dict().items()}
    epochs = 1 if cfg.strategy == "online" else cfg.epochs
    idx, ww = batch_plan(train, w, epochs, cfg.batch_size, seed, k, t)
    if len(idx):
        local = local_train(model, gparams, torch.as_tensor(stream.x), torch.as_tensor(stream.y),
                            torch.as_tensor(idx[None]), torch.as_tensor(ww[None], dtype=torch.float32), lr=cfg.lr,
                            mu=cfg.mu if cfg.strategy == "fedprox" else 0.0)
        new_params = {name: v[0] for name, v in local.items()}
    else:
        new_params = gparams
    saw_raw = stats["n_train"] * float(np.exp(-cfg.gamma * stats["residual_tv"]))
    metrics = MetricRecord({"num-examples": max(stats["n_train"], 0), "saw-weight": saw_raw, "client": k,
                            "residual-tv": stats["residual_tv"], "fresh-frac": stats["fresh_frac"],
                            "buffer-size": stats["buffer_size"], "n-train": stats["n_train"]})
    from collections import OrderedDict

    state_dict = OrderedDict((n, v.detach().cpu().contiguous()) for n, v in new_params.items())
    content = RecordDict({"arrays": ArrayRecord(state_dict), "metrics": metrics})
    return Message(content=content, reply_to=msg)


def make_client_app():
    _flwr()  # the import check (exit 4 with the install hint)
    from flwr.clientapp import ClientApp

    app = ClientApp()
    app.train()(client_train)
    app.evaluate()(client_evaluate)  # the server scores centrally; this only answers a stray evaluate
    return app


def client_evaluate(msg, context):
    from flwr.app import Message, MetricRecord, RecordDict

    return Message(content=RecordDict({"metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)


def saw_fedavg_class():
    """:class:`SAWFedAvg`: FedAvg whose aggregate_train uses our SAW / FedAvg weights."""
    _flwr()
    from flwr.app import ArrayRecord, MetricRecord
    from flwr.serverapp.strategy import FedAvg

    from icmlkit.lib.fed_stream.sim import server_weights

    class SAWFedAvg(FedAvg):
        def __init__(self, run_cfg, n_clients: int, **kw):
            super().__init__(fraction_train=run_cfg.participation, fraction_evaluate=0.0, min_evaluate_nodes=0,
                             min_train_nodes=1, min_available_nodes=n_clients, weighted_by_key="num-examples", **kw)
            self.run_cfg = run_cfg
            self.n_clients = n_clients
            self.round_stats: list = []

        def configure_train(self, server_round, arrays, config, grid):
            config["period"] = int(server_round) - 1  # round r trains on period r-1
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            replies = [r for r in replies if r.has_content()]
            if not replies:
                return None, None
            mets = [r.content["metrics"] for r in replies]
            stats = [{"n_train": int(m["n-train"]), "residual_tv": float(m["residual-tv"]),
                      "fresh_frac": float(m["fresh-frac"]), "buffer_size": int(m["buffer-size"]),
                      "client": int(m["client"])} for m in mets]
            p = server_weights(self.run_cfg, stats, np.ones(len(stats), dtype=bool))
            arrays = [r.content["arrays"].to_numpy_ndarrays() for r in replies]
            avg = [sum(float(pk) * a[i].astype(np.float64) for pk, a in zip(p, arrays)).astype(np.float32)
                   for i in range(len(arrays[0]))]
            keys = list(replies[0].content["arrays"].keys())
            self.round_stats.append({s["client"]: {**s, "saw_weight": float(pk)} for s, pk in zip(stats, p)})
            import torch
            from collections import OrderedDict

            out = OrderedDict((k, torch.from_numpy(a)) for k, a in zip(keys, avg))
            return ArrayRecord(out), MetricRecord({"clients": len(replies)})

    return SAWFedAvg


def serve(grid, stream_path: str, run_cfg, seed: int, record: dict, state_dir: str = "") -> None:
    """The ServerApp's body: SAWFedAvg for T rounds (one per period; ``configure_train`` puts the
    period into the clients' config); ``record`` receives the per-round group accuracies, the
    final parameters and the client statistics."""
    import torch
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

    from icmlkit.lib.fed_stream.models import build_model, group_accuracy, init_params

    stream = _stream(stream_path)
    model = build_model(run_cfg.model, stream.dim, stream.n_classes, seed)
    params = init_params(model, torch.device("cpu"))
    strategy = saw_fedavg_class()(run_cfg, stream.clients)
    Xt, Yt, Gt = torch.as_tensor(stream.x_test), torch.as_tensor(stream.y_test), torch.as_tensor(stream.group_test)
    record["group_acc"] = []

    def evaluate_fn(server_round, arrays):
        if server_round == 0:
            return None
        sd = {n: v.to(torch.float32) for n, v in arrays.to_torch_state_dict().items()}
        record["group_acc"].append(group_accuracy(model, sd, Xt, Yt, Gt, stream.groups).numpy())
        record["params"] = sd
        return MetricRecord({"round": server_round})

    conf = ConfigRecord({"run-config": json.dumps(vars(run_cfg)), "seed": int(seed), "stream-path": stream_path,
                         "state-dir": state_dir})
    from collections import OrderedDict

    strategy.start(grid=grid, initial_arrays=ArrayRecord(OrderedDict(params.items())),
                   num_rounds=stream.periods, train_config=conf, evaluate_fn=evaluate_fn)
    record["stats"] = strategy.round_stats


def make_server_app(stream_path: str, run_cfg, seed: int, record: dict, state_dir: str = ""):
    """A ServerApp running :func:`serve`."""
    _flwr()
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context):
        serve(grid, stream_path, run_cfg, seed, record, state_dir)

    return app


def run_flower_sim(cfg, stream, *, seed: int = 0):
    """``--engine flower-sim``: the same rounds through Flower's Simulation Engine (one SuperNode
    per client); returns the same :class:`~icmlkit.lib.fed_stream.sim.RunResult` as the in-process
    engine."""
    _flwr()
    import time

    from flwr.simulation import run_simulation

    from icmlkit.lib.fed_stream.sim import RunResult, buffer_size, summarise
    from icmlkit.lib.fed_stream.oracles import make_oracle, tv
    from icmlkit.lib.fed_stream.sim import forecasts, observed_histograms
    from icmlkit.lib.fed_stream.streams import write_stream

    record: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "stream.npz")
        write_stream(path, stream)
        t0 = time.perf_counter()
        run_simulation(server_app=make_server_app(path, cfg, seed, record), client_app=make_client_app(),
                       num_supernodes=stream.clients, backend_config={"client_resources": {"num_cpus": 1}})
        seconds = time.perf_counter() - t0
    K, T = stream.clients, stream.periods
    oracle = make_oracle(cfg.oracle, seed=seed)
    obs = observed_histograms(stream)
    rows = []
    for t in range(T):
        acc_g = record["group_acc"][t]
        err = tv(forecasts(oracle, stream, t, obs, np.arange(K)), stream.hist[:, min(t + 1, T - 1)])
        st = record["stats"][t]
        for k in range(K):
            s = st.get(k, {"n_train": 0, "residual_tv": 1.0, "fresh_frac": 0.0, "buffer_size": 0, "saw_weight": 0.0})
            rows.append({"client": k, "period": t, "acc_current": float(stream.hist[k, t] @ acc_g),
                         "acc_next": float(stream.hist[k, t + 1] @ acc_g) if t + 1 < T else None,
                         "buffer_size": s["buffer_size"], "saw_weight": s["saw_weight"], "n_train": s["n_train"],
                         "residual_tv": s["residual_tv"], "fresh_frac": s["fresh_frac"], "forecast_tv_error": float(err[k])})
    meta = {"format": "icmlkit.fedstream.model/1", "model": cfg.model, "in_dim": str(stream.dim),
            "n_classes": str(stream.n_classes), "strategy": cfg.strategy, "oracle": cfg.oracle}
    return RunResult(rows=rows, params=record["params"], meta=meta,
                     summary=summarise(cfg, rows, K, T, buffer_size(cfg, stream), seconds, T, oracle.name, stream),
                     group_acc=np.stack(record["group_acc"]))


# --------------------------------------------------------------------------- export-flower

_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedstream-app"
version = "1.0.0"
description = "icmlkit fed-stream (SFedPO, reconstructed) as a Flower app"
dependencies = ["icmlkit[fed-stream-flower]", "flwr[simulation]==1.42.*"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "icmlkit"

[tool.flwr.app.components]
serverapp = "fedstream_app.server_app:app"
clientapp = "fedstream_app.client_app:app"

[tool.flwr.app.config]
stream-path = "{stream}"
run-config = '{run_config}'
seed = {seed}
state-dir = "{state_dir}"
"""

_CLIENT = '''"""ClientApp: DDS / buffer rule + local training per round (icmlkit.lib.fed_stream.flower)."""
from icmlkit.lib.fed_stream.flower import make_client_app

app = make_client_app()
'''

_SERVER = '''"""ServerApp: SAWFedAvg over one round per stream period; reads its settings from run_config."""
import json

from flwr.serverapp import ServerApp

from icmlkit.lib.fed_stream.config import RunConfig
from icmlkit.lib.fed_stream.flower import serve

app = ServerApp()


@app.main()
def main(grid, context):
    rc = context.run_config
    cfg = RunConfig(**json.loads(rc["run-config"]))
    record = {}
    serve(grid, rc["stream-path"], cfg, int(rc["seed"]), record, str(rc.get("state-dir", "")))
    print(json.dumps({"periods": len(record.get("group_acc", [])),
                      "final_group_accuracy": [float(a) for a in record["group_acc"][-1]]}))
'''

_README = """# fed-stream as a Flower app

Written by `fed-stream export-flower`. The stream file must be readable at `stream-path` on the
server and on every SuperNode (each client reads only its own rows). Flower 1.42 reads SuperLink
connections from `$FLWR_HOME/config.toml` (default `~/.flwr/config.toml`), not from this
pyproject.toml; `flwr-config.toml` here holds the two entries to append to it.

icmlkit is not on a package index: install `icmlkit[fed-stream-flower]` into the environment of the
SuperLink and of every SuperNode, and turn off Flower's per-run dependency installation
(`--disable-runtime-dependency-installation`, or `FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`
for the local simulation), else `uv sync` fails to resolve icmlkit.

Simulation (one machine):
  FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 flwr run . fedstream-sim
Deployment (one SuperLink, one SuperNode per client machine), with TLS and node authentication:
  flower-superlink --ssl-ca-certfile certificates/ca.crt --ssl-certfile certificates/server.pem \\
      --ssl-keyfile certificates/server.key --enable-supernode-auth \\
      --disable-runtime-dependency-installation
  flwr supernode register keys/client_K.pub fedstream-deploy        # once per SuperNode
  flower-supernode --superlink SERVER:8000 --root-certificates certificates/ca.crt \\
      --auth-supernode-private-key keys/client_K --node-config "partition-id=K num-partitions={clients}"
  flwr run . fedstream-deploy
(port 8000 is flwr 1.42's default SuperLink HTTP API; keys from `ssh-keygen -t ecdsa -b 384`.)
Set `state-dir` so that a client's buffer survives a SuperNode restart (context.state does not).
See Flower's docs: "Enable TLS connections", "Authenticate SuperNodes".
"""

_FLWR_CONFIG = """# append to $FLWR_HOME/config.toml (default ~/.flwr/config.toml)
[superlink.fedstream-sim]
address = ":local:"
options.num-supernodes = {clients}

[superlink.fedstream-deploy]
address = "SERVER:8000"
root-certificates = "certificates/ca.crt"
"""


def export_app(folder, stream_path: str, cfg, seed: int, clients: int, state_dir: str = "") -> list[str]:
    """Write the Flower app (pyproject.toml, fedstream_app/*.py, README.md) into ``folder``;
    returns the files written."""
    folder = Path(folder)
    (folder / "fedstream_app").mkdir(parents=True, exist_ok=True)
    files = {
        "pyproject.toml": _PYPROJECT.format(stream=str(stream_path), run_config=json.dumps(vars(cfg)), seed=int(seed),
                                            state_dir=state_dir, clients=int(clients)),
        "fedstream_app/__init__.py": '"""fed-stream Flower app."""\n',
        "fedstream_app/client_app.py": _CLIENT,
        "fedstream_app/server_app.py": _SERVER,
        "README.md": _README.format(clients=int(clients)),
        "flwr-config.toml": _FLWR_CONFIG.format(clients=int(clients)),
    }
    for name, text in files.items():
        write_text(folder / name, text)
    return sorted(files)
