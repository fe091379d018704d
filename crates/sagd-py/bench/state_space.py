"""A long correlated latent from Python: the latent AR(1) series of length T observed with noise
(the Rust example `cargo run --release -p sagd --example state_space`), fitted by `sagd.fit` on a
numpy function with hand-written gradients, against the exact maximum by the Kalman filter.

    python crates/sagd-py/bench/state_space.py [--length 300] [--seeds 1 2 3]

Prints, per simulated series: the fit's time, the calls of the function, EM's M-steps and the
rate at which EM handed over to the polish, the log-likelihood gap to the Kalman maximum, and
the standard errors against the Kalman filter's observed information (by central differences)
at the maximum. Needs numpy and scipy.
"""

import argparse
import time

import numpy as np
from scipy.optimize import minimize

import sagd


def simulate(length, seed, phi=0.9, sd_z=0.5, sd_x=0.5):
    """One series x_t = z_t + sd_x e_t, z_t = phi z_{t-1} + sd_z u_t, z_1 stationary."""
    rng = np.random.default_rng(seed)
    z = np.empty(length)
    z[0] = sd_z / np.sqrt(1 - phi * phi) * rng.standard_normal()
    for t in range(1, length):
        z[t] = phi * z[t - 1] + sd_z * rng.standard_normal()
    return z + sd_x * rng.standard_normal(length)


def kalman_loglik(theta, x):
    """The exact log-likelihood; theta = (atanh phi, log sd_z, log sd_x)."""
    phi, q, r = np.tanh(theta[0]), np.exp(2 * theta[1]), np.exp(2 * theta[2])
    m, p, ll = 0.0, q / (1 - phi * phi), 0.0
    for xt in x:
        s = p + r
        e = xt - m
        ll -= 0.5 * (np.log(2 * np.pi * s) + e * e / s)
        k = p / s
        m, p = phi * (m + k * e), phi * phi * p * (1 - k) + q
    return ll


def model(x):
    """f(theta, points, z) -> (log p, grad_z, sum of grad_theta) for sagd.fit, and its call count."""
    length = len(x)
    calls = [0]

    def f(theta, points, z):
        calls[0] += 1
        phi = np.tanh(theta[0])
        inv_q, inv_r = np.exp(-2 * theta[1]), np.exp(-2 * theta[2])
        stationary = 1 - phi * phi
        e = z[:, 1:] - phi * z[:, :-1]
        o = z - x
        ee, oo = (e * e).sum(1), (o * o).sum(1)
        logp = (0.5 * np.log(stationary) - length * theta[1] - 0.5 * z[:, 0] ** 2 * stationary * inv_q
                - 0.5 * inv_q * ee - length * theta[2] - 0.5 * inv_r * oo)
        grad_z = -inv_r * o
        grad_z[:, 1:] -= inv_q * e
        grad_z[:, :-1] += inv_q * phi * e
        grad_z[:, 0] -= stationary * inv_q * z[:, 0]
        d_phi = -phi / stationary + z[:, 0] ** 2 * phi * inv_q + inv_q * (e * z[:, :-1]).sum(1)
        grad_theta = np.array([
            (d_phi * stationary).sum(),
            (-length + z[:, 0] ** 2 * stationary * inv_q + inv_q * ee).sum(),
            (-length + inv_r * oo).sum(),
        ])
        return logp, grad_z, grad_theta

    return f, calls


def reference_se(theta, x, h=1e-4):
    """Standard errors from the Kalman log-likelihood's Hessian by central differences."""
    p = len(theta)
    hess = np.empty((p, p))
    for j in range(p):
        for k in range(p):
            def at(a, b):
                t = np.array(theta, dtype=float)
                t[j] += a
                t[k] += b
                return kalman_loglik(t, x)
            hess[j, k] = (at(h, h) - at(h, -h) - at(-h, h) + at(-h, -h)) / (4 * h * h)
    return np.sqrt(np.diag(np.linalg.inv(-hess)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=300)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    a = ap.parse_args()
    print("| seed | seconds | calls | M-steps | EM handed over at rate | gap (nats) | se / Kalman's |")
    print("|---|---|---|---|---|---|---|")
    for seed in a.seeds:
        x = simulate(a.length, seed)
        f, calls = model(x)
        start = time.perf_counter()
        fit = sagd.fit(f, [0.0, 0.0, 0.0], 1, a.length, seed=1)
        secs = time.perf_counter() - start
        mle = minimize(lambda t: -kalman_loglik(t, x), fit.estimate, method="Nelder-Mead",
                       options={"xatol": 1e-9, "fatol": 1e-11, "maxiter": 4000}).x
        gap = kalman_loglik(mle, x) - kalman_loglik(fit.estimate, x)
        ratio = fit.se / reference_se(mle, x)
        rate = "—" if fit.handover_rate is None else f"{fit.handover_rate:.2f}"
        print(f"| {seed} | {secs:.2f} | {calls[0]} | {fit.msteps} | {rate} | {gap:.4f} | "
              + ", ".join(f"{r:.3f}" for r in ratio) + " |")


if __name__ == "__main__":
    main()
