"""The Python-callback path's cost against the same model in Rust: a Poisson random-intercept
GLMM fitted with `sagd.glmm` (gradients in Rust) and with `sagd.fit` on a numpy function, same
data, same seed; then the same for several sizes. Prints a Markdown table, with the time the
numpy function itself takes for the same calls (timed alone, block size by block size): a floor
that no driver calling it once per Langevin step can go below.

Run: python crates/sagd-py/bench/overhead.py [--threads N] [--rounds R]
"""

import argparse
import collections
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import sagd  # noqa: E402
from conftest import simulate  # noqa: E402
from models import poisson_intercept  # noqa: E402


def best(f, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        r = f()
        times.append(time.perf_counter() - t)
    return min(times), r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print("| groups × rows | Rust (sagd.glmm) | Python function (sagd.fit) | ratio | calls of the function | the function alone | its ratio to Rust | M-steps (Rust, Python) |")
    print("|---|---|---|---|---|---|---|---|")
    for groups, per in [(50, 8), (200, 8), (1000, 8)]:
        y, X, g = simulate("poisson", groups=groups, per=per)
        rust_t, rust = best(lambda: sagd.glmm(y, X, g, family="poisson", seed=1,
                                              threads=a.threads, method="em"), a.rounds)
        f = poisson_intercept(y, X, g)
        calls = [0]
        sizes = collections.Counter()

        def counted(theta, points, z):
            calls[0] += 1
            sizes[len(points)] += 1
            return f(theta, points, z)

        # The built-in fit's own start (the log of the mean count, 0, sd 0.5), so that both run
        # the same EM.
        start = [np.log(y.mean()), 0.0, np.log(0.5)]
        py_t, py = best(lambda: sagd.fit(counted, start, n_points=groups, latent_dim=1, seed=1,
                                         threads=a.threads), a.rounds)
        alone = function_alone(f, sizes, groups, a.rounds, len(start))
        print(f"| {groups} × {per} | {rust_t:.2f} s | {py_t:.2f} s | {py_t / rust_t:.1f}× | "
              f"{calls[0] // a.rounds} | {alone:.2f} s | {alone / rust_t:.1f}× | "
              f"{rust.msteps}, {py.msteps} |")


def function_alone(f, sizes, groups, rounds, p):
    """Seconds that `f` alone takes for one fit's calls: per block size, the best of a few
    timings of 100 calls on random inputs, times that size's share of the calls."""
    rng = np.random.default_rng(0)
    total = 0.0
    for m, count in sizes.items():
        points = rng.integers(0, groups, size=m)
        z = rng.normal(size=(m, 1))
        theta = np.array([0.5, 0.3, np.log(0.5)])[:p]
        reps = 100
        best_t = min(timeit(f, theta, points, z, reps) for _ in range(3))
        total += best_t / reps * count / rounds
    return total


def timeit(f, theta, points, z, reps):
    t = time.perf_counter()
    for _ in range(reps):
        f(theta, points, z)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
