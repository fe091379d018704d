"""GLMMs fitted by their exact likelihood (method "auto" where it applies): the Gaussian closed
form (ML and REML) and adaptive quadrature, against independent references computed here with
numpy and scipy: the maximum, the log-likelihood and the standard errors, to the references'
own precision."""

import numpy as np
import pytest

import sagd
from conftest import loglik, mle, reference_se, simulate
from test_glmm_terms import (crossed_loglik, hessian, hessian_se, maximum, slopes_data,
                             slopes_loglik)


@pytest.mark.parametrize("family", ["poisson", "binomial", "gaussian"])
def test_random_intercepts_are_the_exact_maximum(family):
    y, X, g = simulate(family, groups=60 if family == "binomial" else 50)
    r = sagd.glmm(y, X, g, family=family)
    assert r.method == "exact" and r.status == "exact" and r.converged, r
    t, lmax = mle(family, y, X, g, r.estimate + 0.05)
    assert lmax - r.loglik < 1e-6, (lmax, r.loglik)
    assert r.loglik == pytest.approx(loglik(family, r.estimate, y, X, g), abs=1e-6)
    np.testing.assert_allclose(r.estimate, t, atol=2e-4)
    np.testing.assert_allclose(r.se, reference_se(family, r.estimate, y, X, g), rtol=2e-3)
    k = len(r.estimate)
    assert r.aic == pytest.approx(-2 * r.loglik + 2 * k)
    assert r.bic == pytest.approx(-2 * r.loglik + k * np.log(len(y)))
    assert "exact" in repr(r) and "AIC" in repr(r)


def test_correlated_slopes_are_the_exact_maximum():
    y, x, g = slopes_data()
    X = np.column_stack([np.ones_like(x), x])
    r = sagd.glmm(y, X, g, family="poisson", Z=X, correlated=True)
    assert r.method == "exact" and r.converged, r
    # Against a 140 x 140 product rule (to 1e-9; too slow to maximise here): the value at the
    # estimate, a gradient there whose Newton step would gain under 1e-7 nats, and the se.
    f = lambda t: slopes_loglik(t, y, x, g, m=140)
    assert r.loglik == pytest.approx(f(r.estimate), abs=1e-6)
    h, k = 1e-4, len(r.estimate)
    grad = np.array([(f(r.estimate + h * e) - f(r.estimate - h * e)) / (2 * h) for e in np.eye(k)])
    H = hessian(f, r.estimate)
    assert 0.5 * grad @ np.linalg.solve(H, grad) < 1e-7, grad
    np.testing.assert_allclose(r.se, np.sqrt(np.diag(np.linalg.inv(H))), rtol=2e-3)


def test_crossed_gaussian_factors_are_the_exact_maximum():
    rng = np.random.default_rng(12)
    A, B = 20, 15
    a, b = np.repeat(np.arange(A), B), np.tile(np.arange(B), A)
    x = rng.normal(size=A * B)
    y = (1.0 + 0.5 * x + rng.normal(scale=0.7, size=A)[a] + rng.normal(scale=0.4, size=B)[b]
         + rng.normal(scale=0.5, size=A * B))
    X = np.column_stack([np.ones_like(x), x])
    r = sagd.glmm(y, X, {"subject": a, "item": b}, family="gaussian")
    assert r.method == "exact" and r.loglik_method == "exact", r
    f = lambda t: crossed_loglik(t, y, x, a, b)  # the dense n x n covariance
    t, lmax = maximum(f, r.estimate + 0.02)
    assert lmax - r.loglik < 1e-6, (lmax, r.loglik)
    assert r.loglik == pytest.approx(f(r.estimate), abs=1e-6)
    np.testing.assert_allclose(r.estimate, t, atol=2e-4)
    np.testing.assert_allclose(r.se, hessian_se(f, r.estimate), rtol=2e-3)


def test_reml_is_the_anova_estimate_on_balanced_data():
    # Balanced one-way: REML's variances are the ANOVA ones, MSW and (MSB - MSW)/n, and the
    # intercept's se is sqrt(MSB / (n G)) (lmer's).
    rng = np.random.default_rng(4)
    G, n = 25, 5
    g = np.repeat(np.arange(G), n)
    y = 2.0 + rng.normal(scale=0.9, size=G)[g] + rng.normal(scale=0.6, size=G * n)
    means = y.reshape(G, n).mean(axis=1)
    msw = ((y.reshape(G, n) - means[:, None]) ** 2).sum() / (G * (n - 1))
    msb = n * ((means - y.mean()) ** 2).sum() / (G - 1)
    r = sagd.glmm(y, None, g, family="gaussian", reml=True)
    assert r.reml and r.reml_loglik is not None, r
    assert r.sigma ** 2 == pytest.approx(msw, rel=1e-6)
    assert r.random_sd[0] ** 2 == pytest.approx((msb - msw) / n, rel=1e-6)
    assert r.fixed[0] == pytest.approx(y.mean(), abs=1e-8)
    assert r.fixed_se[0] == pytest.approx(np.sqrt(msb / (n * G)), rel=1e-5)
    assert r.aic == pytest.approx(-2 * r.reml_loglik + 6)
    assert "REML criterion" in repr(r)


def test_what_has_no_exact_fit_says_so():
    y, X, g = simulate("poisson")
    h = np.arange(len(y)) % 7  # crossed with g: one block of 57 effects
    with pytest.raises(ValueError, match="automated EM"):
        sagd.glmm(y, X, [g, h], family="poisson", method="exact")
    with pytest.raises(ValueError, match="REML"):
        sagd.glmm(y, X, g, family="poisson", reml=True)
    with pytest.raises(ValueError, match="method"):
        sagd.glmm(y, X, g, family="poisson", method="fast")


def test_the_log_likelihood_at_any_estimate():
    y, X, g = simulate("poisson")
    r = sagd.glmm(y, X, g, family="poisson")
    value, err, how = sagd.glmm_loglik(r.estimate, y, X, g, family="poisson")
    assert (value, err, how) == (pytest.approx(r.loglik, abs=1e-8), 0.0, "quadrature")
    other = r.estimate + [0.0, 0.1, 0.0]
    assert sagd.glmm_loglik(other, y, X, g, family="poisson")[0] == pytest.approx(
        loglik("poisson", other, y, X, g), abs=1e-6)
    with pytest.raises(ValueError, match="theta"):
        sagd.glmm_loglik([0.0, 0.0], y, X, g, family="poisson")
