"""GLMMs beyond one random intercept fitted by automated EM (method="em"): correlated random
slopes (against 2-D quadrature) and crossed grouping factors (against the Gaussian closed form),
each at the exact maximum. The references serve test_glmm_exact.py too."""

import numpy as np
import pytest
from scipy import optimize
from scipy.special import gammaln

import sagd
from conftest import by_group

def product_rule(m):
    """An m x m Gauss-Hermite rule for N(0, I): nodes (2, m^2) and log weights. Not centred at
    each group's posterior, so it needs many nodes: on the slopes data 30 were 0.02 nats off,
    60 were 1.4e-4 off, 140 agree with 200 to 1e-9."""
    nodes, weights = np.polynomial.hermite.hermgauss(m)
    u1, u2 = np.meshgrid(np.sqrt(2.0) * nodes, np.sqrt(2.0) * nodes, indexing="ij")
    return np.stack([u1.ravel(), u2.ravel()]), np.log(np.outer(weights, weights).ravel() / np.pi)


RULES = {m: product_rule(m) for m in (60, 140)}


def slopes_loglik(theta, y, x, g, m=60):
    """Poisson, y ~ 1 + x + (1 + x | g): theta = (b0, b1, log L00, log L11, L10), by the m x m
    rule (60: within the EM test's 0.05 nats; 140: to 1e-9)."""
    U, LOGW = RULES[m]
    L = np.array([[np.exp(theta[2]), 0.0], [theta[4], np.exp(theta[3])]])
    B = L @ U  # (2, nodes): intercept and slope effects
    eta = theta[0] + theta[1] * x[:, None] + B[0][None, :] + x[:, None] * B[1][None, :]
    rows = y[:, None] * eta - np.exp(eta) - gammaln(y + 1)[:, None]
    return by_group(rows, g, LOGW)


def crossed_loglik(theta, y, x, a, b):
    """Gaussian, y ~ 1 + x + (1 | a) + (1 | b): theta = (b0, b1, log sd_a, log sd_b, log sigma),
    from the n x n covariance."""
    A = (a[:, None] == a[None, :]) * np.exp(2 * theta[2])
    B = (b[:, None] == b[None, :]) * np.exp(2 * theta[3])
    C = A + B + np.eye(len(y)) * np.exp(2 * theta[4])
    r = y - theta[0] - theta[1] * x
    sign, logdet = np.linalg.slogdet(C)
    return -0.5 * (len(y) * np.log(2 * np.pi) + logdet + r @ np.linalg.solve(C, r))


def maximum(f, start):
    r = optimize.minimize(lambda t: -f(t), start, method="BFGS", options={"gtol": 1e-7})
    return r.x, -r.fun


def hessian_se(f, t, h=1e-4):
    return np.sqrt(np.diag(np.linalg.inv(hessian(f, t, h))))


def hessian(f, t, h=1e-4):
    """-(Hessian of f) at t by central differences."""
    k = len(t)
    H = np.zeros((k, k))
    E = np.eye(k) * h
    for i in range(k):
        for j in range(k):
            H[i, j] = -(f(t + E[i] + E[j]) - f(t + E[i] - E[j]) - f(t - E[i] + E[j])
                        + f(t - E[i] - E[j])) / (4 * h * h)
    return H


def slopes_data():
    """Poisson counts, 60 groups of 8, with correlated random intercepts and slopes (sds 0.5 and
    0.3, correlation 0.6): (y, x, g)."""
    rng = np.random.default_rng(11)
    G, per = 60, 8
    g = np.repeat(np.arange(G), per)
    x = rng.normal(size=G * per)
    Sigma = np.array([[0.5 ** 2, 0.6 * 0.5 * 0.3], [0.6 * 0.5 * 0.3, 0.3 ** 2]])
    b = rng.multivariate_normal([0, 0], Sigma, size=G)
    y = rng.poisson(np.exp(0.5 + 0.3 * x + b[g, 0] + b[g, 1] * x)).astype(float)
    return y, x, g


def test_correlated_random_slopes_fit_the_quadrature_maximum():
    y, x, g = slopes_data()
    X = np.column_stack([np.ones_like(x), x])
    r = sagd.glmm(y, X, g, family="poisson", Z=X, correlated=True, seed=2,
                  z_names=["(Intercept)", "x"], method="em")
    assert r.status == "polished", r
    assert r.names == ["(Intercept)", "x1", "log sd (Intercept)", "log sd x", "L[1,0] groups"]
    f = lambda t: slopes_loglik(t, y, x, g)
    t, lmax = maximum(f, r.estimate + 0.02)
    assert lmax - f(r.estimate) < 0.05, (lmax - f(r.estimate), r)
    assert np.all(np.abs(r.estimate - t) < 4 * r.mc_se + 1e-3), (r.estimate, t, r.mc_se)
    se_ref = hessian_se(f, r.se_at)
    assert np.all(np.abs(r.se - se_ref) < 4 * r.se_error + 0.02 * se_ref), (r.se, se_ref)
    # The log-likelihood at the estimate by adaptive quadrature, against the 140 x 140 rule.
    assert r.loglik_method == "quadrature" and r.loglik_se == 0
    assert r.loglik == pytest.approx(slopes_loglik(r.estimate, y, x, g, m=140), abs=1e-6)
    # The covariance on its natural scale.
    L = np.array([[np.exp(t[2]), 0.0], [t[4], np.exp(t[3])]])
    S = L @ L.T
    np.testing.assert_allclose(r.random_sd, np.sqrt(np.diag(S)), atol=0.02)
    assert r.random_cor[0][0, 1] == pytest.approx(S[0, 1] / np.sqrt(S[0, 0] * S[1, 1]), abs=0.1)
    assert "correlations" in repr(r)


def test_crossed_factors_fit_the_closed_form_maximum():
    rng = np.random.default_rng(12)
    A, B = 20, 15
    a = np.repeat(np.arange(A), B)
    b = np.tile(np.arange(B), A)
    x = rng.normal(size=A * B)
    y = (1.0 + 0.5 * x + rng.normal(scale=0.7, size=A)[a] + rng.normal(scale=0.4, size=B)[b]
         + rng.normal(scale=0.5, size=A * B))
    X = np.column_stack([np.ones_like(x), x])
    r = sagd.glmm(y, X, {"subject": a, "item": b}, family="gaussian", seed=3, method="em")
    assert r.status == "polished", r
    assert r.n_points == 1  # every subject meets every item: one block
    f = lambda t: crossed_loglik(t, y, x, a, b)
    t, lmax = maximum(f, r.estimate + 0.02)
    assert lmax - f(r.estimate) < 0.05, (lmax - f(r.estimate), r)
    assert np.all(np.abs(r.estimate - t) < 4 * r.mc_se + 1e-3), (r.estimate, t, r.mc_se)
    se_ref = hessian_se(f, r.se_at)
    assert np.all(np.abs(r.se - se_ref) < 4 * r.se_error + 0.02 * se_ref), (r.se, se_ref)
    assert r.loglik_method == "exact"
    assert r.loglik == pytest.approx(f(r.estimate), abs=1e-6)
    assert r.random_names == ["subject: (Intercept)", "item: (Intercept)"]
    assert set(r.groups) == {"subject", "item"}
