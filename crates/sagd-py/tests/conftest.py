"""Shared data and references for the Python tests: GLMM data simulated with numpy, and the exact
log-likelihood of a random-intercept model by Gauss-Hermite quadrature, maximised with scipy."""

import subprocess
import sys
import time

import numpy as np
import pytest
from scipy import optimize
from scipy.special import gammaln, log_expit

NODES, WEIGHTS = np.polynomial.hermite.hermgauss(120)
U = np.sqrt(2.0) * NODES
LOGW = np.log(WEIGHTS / np.sqrt(np.pi))


def simulate(family, groups=50, per=8, beta=(0.5, 0.3), tau=0.5, sigma=0.8, seed=1):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), per)
    x = rng.normal(size=groups * per)
    b = rng.normal(scale=tau, size=groups)
    eta = beta[0] + beta[1] * x + b[g]
    if family == "poisson":
        y = rng.poisson(np.exp(eta)).astype(float)
    elif family == "binomial":
        y = (rng.random(eta.shape) < 1 / (1 + np.exp(-eta))).astype(float)
    else:
        y = eta + sigma * rng.normal(size=eta.shape)
    X = np.column_stack([np.ones_like(x), x])
    return y, X, g


def loglik(family, theta, y, X, g):
    """The exact log-likelihood of a random intercept: theta = (beta, log tau[, log sigma])."""
    p = X.shape[1]
    beta, tau = theta[:p], np.exp(theta[p])
    eta = (X @ beta)[:, None] + tau * U[None, :]
    if family == "poisson":
        rows = y[:, None] * eta - np.exp(eta) - gammaln(y + 1)[:, None]
    elif family == "binomial":
        rows = y[:, None] * log_expit(eta) + (1 - y)[:, None] * log_expit(-eta)
    else:
        s2 = np.exp(2 * theta[p + 1])
        rows = -0.5 * np.log(2 * np.pi * s2) - (y[:, None] - eta) ** 2 / (2 * s2)
    return by_group(rows, g, LOGW)


def by_group(rows, g, logw):
    """Sum over groups of log sum_k w_k prod_(rows i of the group) p_i(node k), from the rows'
    log densities at the nodes (rows x nodes) and the log weights."""
    total = 0.0
    for j in np.unique(g):
        a = rows[g == j].sum(axis=0) + logw
        m = a.max()
        total += m + np.log(np.exp(a - m).sum())
    return total


def mle(family, y, X, g, start):
    """The maximum by BFGS from `start`, then Newton steps with central differences (BFGS's own
    forward differences leave it some 1e-7 off, more than a fit whose score is nearly exact
    errs), and the log-likelihood there."""
    f = lambda t: -loglik(family, t, y, X, g)
    t = optimize.minimize(f, start, method="BFGS", options={"gtol": 1e-8}).x
    for _ in range(2):
        k, h = len(t), 1e-5
        grad = np.array([(f(t + np.eye(k)[a] * h) - f(t - np.eye(k)[a] * h)) / (2 * h) for a in range(k)])
        t = t - np.linalg.solve(hessian(f, t), grad)
    return t, -f(t)


def hessian(f, t, h=1e-4):
    """The Hessian of `f` at `t` by central differences."""
    k = len(t)
    H = np.zeros((k, k))
    for a in range(k):
        for b in range(k):
            e_a, e_b = np.eye(k)[a] * h, np.eye(k)[b] * h
            H[a, b] = (f(t + e_a + e_b) - f(t + e_a - e_b) - f(t - e_a + e_b) + f(t - e_a - e_b)) / (4 * h * h)
    return H


def reference_se(family, t, y, X, g):
    """Standard errors at `t` from the Hessian of the exact log-likelihood by differences."""
    f = lambda th: -loglik(family, th, y, X, g)
    return np.sqrt(np.diag(np.linalg.inv(hessian(f, t))))


@pytest.fixture
def poisson_data():
    return simulate("poisson")


def interrupt_after_start(script, again=None):
    """Runs `script` in a fresh Python, sends SIGINT a second after it prints "started" (and a
    second SIGINT `again` seconds after the first, when given), and returns the seconds from the
    first signal to its exit, its stdout and its stderr; checks that it ended by
    KeyboardInterrupt."""
    import signal

    # A shell that starts its jobs in the background leaves SIGINT ignored, and a Python started
    # so never raises KeyboardInterrupt: give the child Ctrl-C's usual disposition.
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "started"
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    if again is not None:
        time.sleep(again)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err, err
    return took, out, err
