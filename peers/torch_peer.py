#!/usr/bin/env python3
"""The paper's experiments in PyTorch, written for this project as the yardstick of sagd's speed:
the same settings as sagd's defaults, timed phase by phase. Not part of sagd: it needs torch,
numpy and scipy (`pip install torch numpy scipy`).

  torch_peer.py e1 [--threads T] [--out JSON]
      E1's SAGD phase: three M-steps of T = 100 updates on the Gamma-sigmoid model (n = 100),
      one chain per point, K_t = t + 20, delta_t = 0.1/sqrt(t), 100 burn-in steps, gamma = 1.
  torch_peer.py e2 --dist {normal,exp,mixture,highdim} [--reps 1] [--seed-offset S] [--threads T]
                [--pretrain-epochs E] [--finetune-epochs F] [--device D] [--out JSON]
      E2: one replication per seed (pre-training, then VAE, IWAE, HMC and SAGD fine-tuning from the
      same weights), D and W against pi, wall seconds per phase. The JSON's `summary` holds, for
      `pretrained` and each method, `D`, `W` and `time_mean_s` (what `sagd bench debias --peer`
      reads).
  torch_peer.py e3 --data DIR [--threads T] [--vae-batches V] [--sagd-batches S] [--device D]
                [--out JSON]
      E3: seconds per minibatch of 200 images of the VAE's training and of SAGD's refinement
      (20 chains of 5 Euler steps per image), the fastest (and the mean) of V and S timed
      minibatches after one warm-up each.

Float32 throughout, as sagd's engine.
"""
import argparse
import gzip
import json
import math
import os
import struct
import time

import numpy as np
import torch
from scipy import stats

F = torch.float32


def mlp(widths, act=torch.nn.Softplus):
    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(act())
    return torch.nn.Sequential(*layers)


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


# ---------------------------------------------------------------------------------------------
# E1

def e1(args):
    torch.manual_seed(1)
    n = 100
    z = torch.randn(n, dtype=torch.float64)
    shape = 10 * torch.sigmoid(2.0 + 0.5 * z)
    x = torch.distributions.Gamma(shape, torch.ones(n, dtype=torch.float64)).sample()

    logx = torch.log(x)

    def slope(th, zz):
        """d/d(a + b z) of log p(x, z; theta) = 10 sigma (1 - sigma) (log x - digamma(s))."""
        sig = torch.sigmoid(th[0] + th[1] * zz)
        return 10 * sig * (1 - sig) * (logx - torch.digamma(10 * sig))

    def grad_z(th, zz):
        return slope(th, zz) * th[1] - zz

    def grad_theta(th, zz):
        w = slope(th, zz)
        return torch.stack([w.sum(), (w * zz).sum()])

    theta = torch.tensor([0.0, 1.0], dtype=torch.float64)
    chain = torch.zeros(n, dtype=torch.float64)
    rho = torch.zeros(n, dtype=torch.float64)
    gamma, alpha = 1.0, 0.2

    def step(anchor, delta):
        nonlocal chain, rho
        gz = grad_z(anchor, chain)
        chain, rho = chain + delta * rho, (1 - gamma * delta) * rho + delta * gz \
            + math.sqrt(2 * gamma * delta) * torch.randn(n, dtype=torch.float64)

    def run():
        nonlocal theta
        for _ in range(3):
            anchor = theta.clone()
            for _ in range(100):  # burn-in at the first step size
                step(anchor, 0.1)
            for t in range(1, 101):
                delta, k = 0.1 / math.sqrt(t), t + 20
                acc = torch.zeros(2, dtype=torch.float64)
                for _ in range(k):
                    step(anchor, delta)
                    acc += grad_theta(theta, chain)
                theta = theta + alpha * acc / (k * n)
        return theta

    theta, secs = timed(run)
    result = {"sagd_phase_s": secs, "theta": theta.tolist()}
    print(f"E1 SAGD phase: {secs:.2f} s, theta {theta.tolist()}")
    return result


# ---------------------------------------------------------------------------------------------
# E2

def draw_pi(dist, size, rng):
    if dist == "normal":
        return rng.normal(1.0, 0.5, size)
    if dist in ("exp", "highdim"):
        return rng.exponential(2.0, size)
    pick = rng.random(size) < 0.4
    return np.where(pick, rng.normal(0.0, 0.5, size), rng.normal(3.0, 0.5, size))


def cdf_pi(dist, z):
    if dist == "normal":
        return stats.norm.cdf(z, 1.0, 0.5)
    if dist in ("exp", "highdim"):
        return stats.expon.cdf(z, scale=2.0)
    return 0.4 * stats.norm.cdf(z, 0.0, 0.5) + 0.6 * stats.norm.cdf(z, 3.0, 0.5)


def distances(dist, draws):
    """Kolmogorov-Smirnov D and 1-Wasserstein W of the draws' empirical law to pi (exact CDF)."""
    z = np.sort(draws)
    m = len(z)
    f = cdf_pi(dist, z)
    d = max(np.max(np.arange(1, m + 1) / m - f), np.max(f - np.arange(m) / m))
    # W = integral |F_hat - F|: F_hat is a step function; integrate F numerically on a fine grid.
    lo, hi = min(z[0], -10.0), max(z[-1], 30.0)
    grid = np.linspace(lo, hi, 200001)
    fh = np.searchsorted(z, grid, side="right") / m
    w = np.trapezoid(np.abs(fh - cdf_pi(dist, grid)), grid)
    return float(d), float(w)


class Vae(torch.nn.Module):
    def __init__(self, p, hidden):
        super().__init__()
        self.p = p
        self.dec = mlp([p, hidden, hidden, p])
        self.enc = mlp([p, hidden, hidden, 2 * p])

    def encode(self, x):
        h = self.enc(x)
        return h[:, : self.p], h[:, self.p:]

    def log_lik(self, x, u):
        """log p(x | u) up to a constant: X | U ~ N(h(U), I)."""
        return -0.5 * ((x - self.dec(u)) ** 2).sum(-1)


def elbo_loss(vae, x):
    mu, lv = vae.encode(x)
    u = mu + torch.exp(0.5 * lv) * torch.randn_like(mu)
    kl = 0.5 * (mu ** 2 + lv.exp() - lv - 1).sum(-1)
    return (kl - vae.log_lik(x, u)).mean()


def iwae_loss(vae, x, k):
    mu, lv = vae.encode(x)
    sd = torch.exp(0.5 * lv)
    eps = torch.randn((k,) + mu.shape, device=mu.device)
    u = mu + sd * eps
    log_q = (-0.5 * eps ** 2 - 0.5 * lv).sum(-1)
    log_prior = (-0.5 * u ** 2).sum(-1)
    log_w = vae.log_lik(x.expand(k, *x.shape), u) + log_prior - log_q
    return -(torch.logsumexp(log_w, 0) - math.log(k)).mean()


def grad_u(vae, x, u):
    u = u.detach().requires_grad_(True)
    lp = vae.log_lik(x, u) - 0.5 * (u ** 2).sum(-1)
    (g,) = torch.autograd.grad(lp.sum(), u)
    return lp.detach(), g


def theta_step(vae, opt, x, states):
    """Adam on the decoder with the average over the chain states of -grad log p(x | u)."""
    opt.zero_grad()
    loss = -sum(vae.log_lik(x, s).mean() for s in states) / len(states)
    loss.backward()
    opt.step()


def e2_replication(dist, seed, pre_epochs, ft_epochs, dev):
    highdim = dist == "highdim"
    p, n, hidden, batch = (100, 10000, 256, 500) if highdim else (1, 1000, 64, 1000)
    rng = np.random.default_rng(seed)
    z = draw_pi(dist, (n, p), rng)
    x_all = torch.tensor(z + rng.normal(0, 1, (n, p)), dtype=F, device=dev)
    torch.manual_seed(seed)
    vae = Vae(p, hidden).to(dev)
    batches = lambda: torch.randperm(n, device=dev).split(batch) if batch < n else [torch.arange(n, device=dev)]

    def pretrain():
        opt = torch.optim.Adam(vae.parameters(), lr=1e-3, fused=True)
        for _ in range(pre_epochs):
            for b in batches():
                opt.zero_grad()
                elbo_loss(vae, x_all[b]).backward()
                opt.step()

    def assess(model):
        with torch.no_grad():
            draws = model.dec(torch.randn(100000, p, device=dev)).cpu().numpy()
        ds = [distances(dist, draws[:, j]) for j in range(p)]
        return float(np.mean([d for d, _ in ds])), float(np.mean([w for _, w in ds]))

    _, t_pre = timed(pretrain)
    state = {k: v.clone() for k, v in vae.state_dict().items()}
    out = {"pretrained": dict(zip(("D", "W"), assess(vae)), time_s=t_pre)}
    delta, gamma, K, burn, L = 0.02, 2.0, 10, 50, 5
    for method in ("vae", "iwae", "hmc", "sagd"):
        vae.load_state_dict(state)
        chains = {}

        def finetune():
            params = vae.parameters() if method in ("vae", "iwae") else vae.dec.parameters()
            opt = torch.optim.Adam(params, lr=1e-3, fused=True)
            if method == "sagd":
                # Persistent chains from an encoder draw, momenta N(0, I), burnt in once.
                with torch.no_grad():
                    mu, lv = vae.encode(x_all)
                    chains["u"] = mu + torch.exp(0.5 * lv) * torch.randn_like(mu)
                    chains["r"] = torch.randn_like(mu)
                for b in batches():
                    u, r = chains["u"][b], chains["r"][b]
                    for _ in range(burn):
                        _, g = grad_u(vae, x_all[b], u)
                        u, r = u + delta * r, (1 - gamma * delta) * r + delta * g \
                            + math.sqrt(2 * gamma * delta) * torch.randn_like(r)
                    chains["u"][b], chains["r"][b] = u, r
            for _ in range(ft_epochs):
                for b in batches():
                    x = x_all[b]
                    if method == "vae":
                        opt.zero_grad()
                        elbo_loss(vae, x).backward()
                        opt.step()
                    elif method == "iwae":
                        opt.zero_grad()
                        iwae_loss(vae, x, 50).backward()
                        opt.step()
                    elif method == "hmc":
                        with torch.no_grad():
                            mu, lv = vae.encode(x)
                            u = mu + torch.exp(0.5 * lv) * torch.randn_like(mu)
                        lp, g = grad_u(vae, x, u)
                        states = []
                        for _ in range(K):
                            r0 = torch.randn_like(u)
                            un, r, gn = u, r0 + 0.5 * delta * g, g
                            for step in range(L):
                                un = un + delta * r
                                lpn, gn = grad_u(vae, x, un)
                                if step < L - 1:
                                    r = r + delta * gn
                            r = r + 0.5 * delta * gn
                            log_a = lpn - lp - 0.5 * (r ** 2).sum(-1) + 0.5 * (r0 ** 2).sum(-1)
                            ok = (torch.log(torch.rand_like(lp)) < log_a).unsqueeze(-1)
                            u = torch.where(ok, un, u)
                            lp = torch.where(ok.squeeze(-1), lpn, lp)
                            g = torch.where(ok, gn, g)
                            states.append(u)
                        theta_step(vae, opt, x, states)
                    else:
                        u, r = chains["u"][b], chains["r"][b]
                        states = []
                        for _ in range(K):
                            _, g = grad_u(vae, x, u)
                            u, r = u + delta * r, (1 - gamma * delta) * r + delta * g \
                                + math.sqrt(2 * gamma * delta) * torch.randn_like(r)
                            states.append(u)
                        chains["u"][b], chains["r"][b] = u, r
                        theta_step(vae, opt, x, states)

        _, t = timed(finetune)
        out[method] = dict(zip(("D", "W"), assess(vae)), time_s=t)
    return out


def e2(args):
    reps = [e2_replication(args.dist, args.seed_offset + s,
                           args.pretrain_epochs or (10000 if args.dist == "highdim" else 5000),
                           args.finetune_epochs or 1000, torch.device(args.device))
            for s in range(args.reps)]
    summary = {}
    for who in reps[0]:
        summary[who] = {k: float(np.mean([r[who][k] for r in reps])) for k in ("D", "W")}
        summary[who]["time_mean_s"] = float(np.mean([r[who]["time_s"] for r in reps]))
    for who, v in summary.items():
        print(f"{who:10} D {v['D']:.3f}  W {v['W']:.3f}  {v['time_mean_s']:.2f} s")
    return {"dist": args.dist, "replications": reps, "summary": summary}


# ---------------------------------------------------------------------------------------------
# E3

def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        _, dims = struct.unpack(">HBB", f.read(4))[1:]
        shape = struct.unpack(">" + "I" * dims, f.read(4 * dims))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(shape)


def e3(args):
    name = next(f for f in os.listdir(args.data) if f.startswith("train-images"))
    images = torch.tensor(read_idx(os.path.join(args.data, name)), dtype=F).reshape(-1, 784) / 255
    d, b = 20, 200
    dev = torch.device(args.device)
    gen = torch.nn.Sequential(
        torch.nn.Linear(d, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 7 * 7 * 64), torch.nn.ReLU(),
        torch.nn.Unflatten(1, (64, 7, 7)),
        torch.nn.ConvTranspose2d(64, 32, 4, 2, 1), torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(32, 1, 4, 2, 1), torch.nn.Flatten()).to(dev)
    enc = torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 28, 28)),
        torch.nn.Conv2d(1, 32, 4, 2, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, 2, 1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(7 * 7 * 64, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 2 * d)).to(dev)
    bce = torch.nn.BCEWithLogitsLoss(reduction="none")
    vae_opt = torch.optim.Adam(list(gen.parameters()) + list(enc.parameters()), lr=1e-3, fused=True)
    sagd_opt = torch.optim.Adam(gen.parameters(), lr=1e-4, fused=True)
    chains, steps, gamma, delta = 20, 5, 2.0, 0.01

    def batch(k):
        x = images[(k * b) % len(images):][:b]
        return torch.bernoulli(x).to(dev)

    def log_lik(x, u):
        return -bce(gen(u), x).sum(-1)

    def vae_step(x):
        vae_opt.zero_grad()
        h = enc(x)
        mu, lv = h[:, :d], h[:, d:]
        u = mu + torch.exp(0.5 * lv) * torch.randn_like(mu)
        kl = 0.5 * (mu ** 2 + lv.exp() - lv - 1).sum(-1)
        (kl - log_lik(x, u)).mean().backward()
        vae_opt.step()

    def sagd_step(x):
        with torch.no_grad():
            h = enc(x)
            mu, lv = h[:, :d], h[:, d:]
            xs = x.repeat(chains, 1)
            mu, sd = mu.repeat(chains, 1), torch.exp(0.5 * lv).repeat(chains, 1)
            u = mu + sd * torch.randn_like(mu)
            r = torch.randn_like(u)
        for p in gen.parameters():
            p.requires_grad_(False)
        for _ in range(steps):
            uu = u.detach().requires_grad_(True)
            (g,) = torch.autograd.grad((log_lik(xs, uu) - 0.5 * (uu ** 2).sum(-1)).sum(), uu)
            u, r = u + delta * r, (1 - gamma * delta) * r + delta * g \
                + math.sqrt(2 * gamma * delta) * torch.randn_like(r)
        for p in gen.parameters():
            p.requires_grad_(True)
        sagd_opt.zero_grad()
        (-log_lik(xs, u.detach()).mean()).backward()
        sagd_opt.step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    out = {}
    for name, step, count in (("vae", vae_step, args.vae_batches), ("sagd", sagd_step, args.sagd_batches)):
        if count == 0:
            continue
        times = []
        for k in range(count + 1):
            x = batch(k)
            sync()
            t = time.perf_counter()
            step(x)
            sync()
            times.append(time.perf_counter() - t)
        best = min(times[1:])
        mean = sum(times[1:]) / count
        out[name] = {"seconds_per_minibatch": best, "mean_seconds_per_minibatch": mean,
                     "seconds_per_epoch": best * 300, "timed": count}
        print(f"{name}: {best:.4f} s per minibatch of {b} (mean {mean:.4f}), {best * 300:.1f} s per epoch of 300")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("e1", "e2", "e3"):
        p = sub.add_parser(name)
        p.add_argument("--threads", type=int, default=0)
        p.add_argument("--out")
        if name == "e2":
            p.add_argument("--dist", default="exp", choices=["normal", "exp", "mixture", "highdim"])
            p.add_argument("--reps", type=int, default=1)
            p.add_argument("--seed-offset", type=int, default=0)
            p.add_argument("--pretrain-epochs", type=int, default=0)
            p.add_argument("--finetune-epochs", type=int, default=0)
        if name == "e3":
            p.add_argument("--data", default="data/mnist")
            p.add_argument("--vae-batches", type=int, default=20)
            p.add_argument("--sagd-batches", type=int, default=2)
        if name in ("e2", "e3"):
            p.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"e1": e1, "e2": e2, "e3": e3}[args.cmd](args)
    result["torch"] = torch.__version__
    result["threads"] = torch.get_num_threads()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
