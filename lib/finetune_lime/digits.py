"""The real-data check on scikit-learn's digits (shipped in its wheel): an MLP backbone pretrained
on the 10 classes, frozen, then adapted to several binary attribute tasks at once (even, >= 5,
prime, has a closed loop), the task identity only as a one-hot block appended to the pixels
[reconstructed design]. The adapters wrap the MLP's hidden Linears (fc1, fc2) by suffix with the
same module swap as the language models; a new 2-way head is trained with every method.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from icmlkit.lib.core.runtime import generator, seeded
from icmlkit.lib.finetune_lime.adapter import apply_adapter, count_parts, param_groups

TASKS = {"even": lambda y: y % 2 == 0, "ge5": lambda y: y >= 5, "prime": lambda y: np.isin(y, [2, 3, 5, 7]),
         "loop": lambda y: np.isin(y, [0, 6, 8, 9])}


class MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int = 128, n_out: int = 10):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(d_in, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, n_out)

    def features(self, x):
        return F.relu(self.fc2(F.relu(self.fc1(x))))

    def forward(self, x):
        return self.head(self.features(x))


def load_split(seed: int = 0):
    from sklearn.datasets import load_digits

    d = load_digits()
    X = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.7 * len(y))
    return X[perm[:cut]], y[perm[:cut]], X[perm[cut:]], y[perm[cut:]]


def pretrain(X, y, n_tasks: int, *, seed: int = 0, steps: int = 400) -> MLP:
    with seeded(seed, "digits-init"):
        m = MLP(X.shape[1] + n_tasks)
    Xt = torch.tensor(np.hstack([X, np.zeros((len(X), n_tasks), np.float32)]))
    yt = torch.tensor(y)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(steps):
        loss = F.cross_entropy(m(Xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


def multitask(X, y):
    T = len(TASKS)
    Xs, ls, ts = [], [], []
    for j, f in enumerate(TASKS.values()):
        oh = np.zeros((len(X), T), np.float32)
        oh[:, j] = 1
        Xs.append(np.hstack([X, oh]))
        ls.append(f(y).astype(np.int64))
        ts.append(np.full(len(X), j))
    return torch.tensor(np.vstack(Xs)), torch.tensor(np.concatenate(ls)), np.concatenate(ts)


def run_digits(backbone_state: dict, acfg, X, y, Xte, yte, *, seed: int = 0, steps: int = 300, lr: float = 5e-3):
    """Adapt a copy of the frozen backbone with ``acfg`` (targets fc1, fc2) and a new head; returns
    accuracy overall and per task, trainable parameters (adapter + head) and seconds."""
    T = len(TASKS)
    m = MLP(X.shape[1] + T)
    m.load_state_dict(backbone_state)
    ad = apply_adapter(m, acfg, seed=seed)
    ad.ctx.generator = generator(seed, "jitter")
    with seeded(seed, "head"):
        head = nn.Linear(m.head.in_features, 2)
    Xa, la, _ = multitask(X, y)
    Xb, lb, tb = multitask(Xte, yte)
    groups = param_groups(ad, lr, lr, 0.01)
    groups[0]["params"] = groups[0]["params"] + list(head.parameters())
    opt = torch.optim.AdamW(groups)
    g = generator(seed, "digits-batches")
    t0 = time.perf_counter()
    ad.train(True)
    for step in range(steps):
        idx = torch.randint(0, len(la), (256,), generator=g)
        ad.ctx.reset()
        ad.ctx.collect = True
        loss = F.cross_entropy(head(m.features(Xa[idx])), la[idx])
        imp = sum((a for a, _ in ad.ctx.aux), torch.zeros(()))
        kl = sum((b for _, b in ad.ctx.aux), torch.zeros(()))
        ad.ctx.collect = False
        loss = loss + 0.01 * (imp + 0.1 * kl)
        opt.zero_grad()
        loss.backward()
        opt.step()
    secs = time.perf_counter() - t0
    ad.train(False)
    with torch.no_grad():
        pred = head(m.features(Xb)).argmax(-1).numpy()
    ok = pred == lb.numpy()
    per = {name: float(ok[tb == j].mean()) for j, name in enumerate(TASKS)}
    c = count_parts(ad)
    return {"accuracy": float(ok.mean()), "per_task": per, "trainable_params": c["trainable"] + 2 * 128 + 2,
            "router_params": c["router_params"], "seconds": round(secs, 3)}
