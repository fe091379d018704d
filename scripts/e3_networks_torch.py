#!/usr/bin/env python3
"""Times E3's generator and encoder in PyTorch on a batch of 200, as `cargo bench -p sagd-apps
--bench e3 -- e3_batch200` times ours: forward, and forward + backward (generator: to its
parameters and its input; encoder: to its parameters). Usage: e3_networks_torch.py [threads]."""
import sys
import time

import torch
import torch.nn as nn

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
torch.set_num_threads(threads)
torch.manual_seed(0)
D, B = 20, 200


class Gen(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, 1024)
        self.b = nn.Linear(1024, 3136)
        self.c = nn.ConvTranspose2d(64, 32, 4, 2, 1)
        self.d = nn.ConvTranspose2d(32, 1, 4, 2, 1)

    def forward(self, u):
        h = torch.relu(self.b(torch.relu(self.a(u)))).view(-1, 64, 7, 7)
        return self.d(torch.relu(self.c(h))).flatten(1)


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(1, 32, 4, 2, 1)
        self.b = nn.Conv2d(32, 64, 4, 2, 1)
        self.c = nn.Linear(3136, 1024)
        self.d = nn.Linear(1024, 2 * D)

    def forward(self, x):
        h = torch.relu(self.b(torch.relu(self.a(x.view(-1, 1, 28, 28))))).flatten(1)
        return self.d(torch.relu(self.c(h)))


def timeit(f, reps):
    f()
    f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


for name, net, x, grad_x in [("generator", Gen(), torch.randn(B, D), True),
                             ("encoder", Enc(), torch.rand(B, 784), False)]:
    x.requires_grad_(grad_x)
    with torch.no_grad():
        fwd = timeit(lambda: net(x), 30)

    def fb():
        net.zero_grad(set_to_none=True)
        out = net(x)
        out.backward(torch.full_like(out, 0.01))

    print(f"{name}: forward {fwd:.1f} ms, forward+backward {timeit(fb, 20):.1f} ms "
          f"(torch {torch.__version__}, {threads} thread(s), batch {B})")
