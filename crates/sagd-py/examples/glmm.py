"""A Poisson GLMM with a random intercept per group, fitted by sagd from numpy arrays (by its
exact likelihood: adaptive quadrature, as lme4's glmer with nAGQ = 25), and the same model written
as a Python function for `sagd.fit` (automated EM with Langevin chains, the route for models
without a closed form or quadrature): the same estimates within EM's Monte Carlo errors.

Run: python crates/sagd-py/examples/glmm.py   (after `pip install ./crates/sagd-py`)
"""

import time

import numpy as np

import sagd

# 50 groups of 8 counts: log E[y] = 0.5 + 0.3 x + b_g, b_g ~ N(0, 0.5²).
rng = np.random.default_rng(1)
g = np.repeat(np.arange(50), 8)
x = rng.normal(size=400)
y = rng.poisson(np.exp(0.5 + 0.3 * x + rng.normal(scale=0.5, size=50)[g])).astype(float)
X = np.column_stack([np.ones_like(x), x])

t = time.perf_counter()
r = sagd.glmm(y, X, g, family="poisson", x_names=["(Intercept)", "x"], seed=1)
print(r)
print(f"({time.perf_counter() - t:.2f} s)\n")

# The same model as a function of (theta, points, z): theta = (b0, b1, log sd), z the groups'
# standardised intercepts; one call serves a block of chains.
Y, XX = y.reshape(50, 8), X.reshape(50, 8, 2)
log_fact = np.array([sum(np.log(np.arange(1, k + 1))) for k in y]).reshape(50, 8).sum(axis=1)


def f(theta, points, z):
    beta, sd = theta[:2], np.exp(theta[2])
    u = z[:, 0]
    eta = XX[points] @ beta + sd * u[:, None]
    d = Y[points] - np.exp(eta)
    logp = (Y[points] * eta - np.exp(eta)).sum(1) - log_fact[points] - 0.5 * u * u - 0.5 * np.log(2 * np.pi)
    grad_z = (d.sum(1) * sd - u)[:, None]
    grad_theta = np.r_[np.einsum("rm,rmp->p", d, XX[points]), (d.sum(1) * sd * u).sum()]
    return logp, grad_z, grad_theta


t = time.perf_counter()
own = sagd.fit(f, [0.0, 0.0, np.log(0.5)], n_points=50, latent_dim=1, seed=1,
               names=["(Intercept)", "x", "log sd"])
print(own)
print(f"({time.perf_counter() - t:.2f} s)")
