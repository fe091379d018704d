"""The built-in GLMMs fitted by automated EM (method="em") against the exact maximum of the
likelihood (quadrature + BFGS); the exact fits (the default where they apply) are in
test_glmm_exact.py."""

import numpy as np
import pytest

import sagd
from conftest import loglik, mle, reference_se, simulate


@pytest.mark.parametrize("family", ["poisson", "binomial", "gaussian"])
def test_random_intercept_fits_the_quadrature_maximum(family):
    y, X, g = simulate(family, groups=60 if family == "binomial" else 50)
    r = sagd.glmm(y, X, g, family=family, seed=1, method="em")
    assert r.status == "polished", r
    gaussian = family == "gaussian"
    start = np.r_[r.estimate] + 0.05
    t, lmax = mle(family, y, X, g, start)
    # The estimate at the maximum: within 0.05 nats, and within its Monte Carlo error.
    gap = lmax - loglik(family, r.estimate, y, X, g)
    assert gap < 0.05, (gap, r)
    # The Gaussian family's control variate is exact: its Monte Carlo error falls to 1e-12 and
    # what is left is the remainder of Newton's last step (5e-7 to 7e-7 here; the core's tests
    # read it from the answer's own information, `reported_error`), under a floor of 1e-5.
    err = np.abs(r.estimate - t) / (r.mc_se + 1e-5 * (1 + np.abs(t)))
    assert np.all(err < 4.0), (err, r.estimate, t)
    # Standard errors within four of their own reported errors of the exact ones where the
    # information was taken, and that error below 10% of them.
    se_ref = reference_se(family, r.se_at, y, X, g)
    assert np.all(np.abs(r.se - se_ref) < 4 * r.se_error + 1e-9), (r.se, r.se_error, se_ref)
    assert np.all(r.se_error < 0.1 * r.se)
    # The reported log-likelihood is the exact one at the estimate (all constants included).
    assert r.loglik == pytest.approx(loglik(family, r.estimate, y, X, g), abs=1e-6)
    assert (r.sigma is not None) == gaussian
    assert r.random_sd[0] == pytest.approx(np.exp(r.estimate[2]))
    assert "GLMM (" + family + ")" in repr(r)


def test_the_same_seed_gives_the_same_fit_on_any_number_of_threads(poisson_data):
    y, X, g = poisson_data
    one = sagd.glmm(y, X, g, family="poisson", seed=7, threads=1, method="em")
    two = sagd.glmm(y, X, g, family="poisson", seed=7, threads=2, method="em")
    assert np.array_equal(one.estimate, two.estimate)
    assert np.array_equal(one.se, two.se)
    other = sagd.glmm(y, X, g, family="poisson", seed=8, threads=2, method="em")
    assert not np.array_equal(one.estimate, other.estimate)


def test_group_labels_of_any_kind(poisson_data):
    y, X, g = poisson_data
    labels = np.array([f"school-{j:03d}" for j in g])
    a = sagd.glmm(y, X, labels, family="poisson", seed=3)
    b = sagd.glmm(y, X, g, family="poisson", seed=3)
    assert np.array_equal(a.estimate, b.estimate)
    assert a.groups[0] == "school-000"


def test_bad_inputs_name_the_argument(poisson_data):
    y, X, g = poisson_data
    with pytest.raises(ValueError, match="X: expected 400 rows"):
        sagd.glmm(y, X[:-1], g, family="poisson")
    bad = y.copy()
    bad[5] = np.nan
    with pytest.raises(ValueError, match="y: nan at position 5"):
        sagd.glmm(bad, X, g, family="poisson")
    neg = y.copy()
    neg[3] = -1
    with pytest.raises(ValueError, match="row 3"):
        sagd.glmm(neg, X, g, family="poisson")
    with pytest.raises(ValueError, match="unknown family"):
        sagd.glmm(y, X, g, family="gamma")
    with pytest.raises(ValueError, match="groups: expected 400"):
        sagd.glmm(y, X, g[:10], family="poisson")
    with pytest.raises(ValueError, match="trials"):
        sagd.glmm(y, X, g, family="poisson", trials=np.ones_like(y))
    # The silent or misblamed fits: all-zero counts ("polished", beta0 = -194.7), a
    # duplicated column, a constant Gaussian y (blamed on a learning rate), bad trials (blamed
    # on y).
    with pytest.raises(ValueError, match="0 in every row"):
        sagd.glmm(np.zeros_like(y), X, g, family="poisson")
    with pytest.raises(ValueError, match="column 2 is a linear combination"):
        sagd.glmm(y, np.column_stack([X, X[:, 1]]), g, family="poisson")
    with pytest.raises(ValueError, match="fitted exactly by the fixed effects"):
        sagd.glmm(np.ones_like(y), X, g, family="gaussian")
    with pytest.raises(ValueError, match="trials"):
        sagd.glmm(np.minimum(y, 1), X, g, family="binomial", trials=-np.ones_like(y))
    # Variances the data cannot tell apart, refused as lme4 refuses them.
    with pytest.raises(ValueError, match="has one level"):
        sagd.glmm(y, X, np.zeros_like(g), family="poisson")
    with pytest.raises(ValueError, match="a level for each of the 400 observations"):
        sagd.glmm(y, X, np.arange(len(y)), family="gaussian")
    # Names by the core's rule (Glmm::theta_names): one per column.
    with pytest.raises(ValueError, match="x_names.*one name per column of X"):
        sagd.glmm(y, X, g, family="poisson", x_names=["a"])
    with pytest.raises(ValueError, match="z_names.*one name per column of groups's Z"):
        sagd.glmm(y, X, g, family="poisson", z_names=["a", "b"])


def test_no_variation_between_groups_is_reported_as_a_singular_fit():
    # Counts with no group effect at all: the random-effect sd's maximum is at 0 (lme4 calls
    # this a singular fit), where log sd has no finite estimate and no standard error.
    rng = np.random.default_rng(5)
    g = np.repeat(np.arange(40), 6)
    y = rng.poisson(2.0, size=g.shape).astype(float)
    r = sagd.glmm(y, None, g, family="poisson", seed=1, max_msteps=10)
    assert r.random_sd[0] < 0.05, r
    assert r.warning is not None and "singular fit" in r.warning
    assert "singular fit" in repr(r)
    # and a model with group variation is not.
    y2, X2, g2 = simulate("poisson")
    assert sagd.glmm(y2, X2, g2, family="poisson", seed=1).warning is None


def test_a_model_without_fixed_effects_is_fitted_at_its_boundary():
    # y ~ 0 + (1 | g) on three groups of (1, 0): the maximum is at sd 0 with sigma^2 = 1/2,
    # where the log-likelihood is -3 ln(pi) - 3 (the closed form of six iid normals).
    y = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    labels = np.array(["a", "a", "b", "b", "c", "c"])
    for r in (sagd.glmm(y, np.zeros((6, 0)), labels),
              sagd.glmm("y ~ 0 + (1 | g)", data={"y": y, "g": labels})):
        assert len(r.fixed) == 0
        assert r.random_sd[0] < 1e-4 and abs(r.sigma - 0.5 ** 0.5) < 1e-9, r
        assert abs(r.loglik - (-3 * np.log(np.pi) - 3)) < 1e-9, r
        assert "singular fit" in r.warning


def test_separated_responses_are_named_in_the_warning():
    # y = 1 exactly where x >= 2: the slope's maximum is at infinity (R's glm warns the same).
    x = np.arange(40) / 10.0
    y = (x >= 2.0).astype(float)
    g = np.arange(40) % 4
    r = sagd.glmm(y, np.column_stack([np.ones(40), x]), g, family="binomial")
    assert r.warning is not None and "numerically 0 or 1" in r.warning, r.warning
    # and overlapping responses are not.
    y2 = (np.arange(40) * 7 % 3 == 0).astype(float)
    r2 = sagd.glmm(y2, np.column_stack([np.ones(40), x]), g, family="binomial")
    assert r2.warning is None or "numerically" not in r2.warning, r2.warning


def test_ranef_are_the_shrunken_group_means_of_a_gaussian_fit():
    # A one-way Gaussian model: b_g = tau^2 / (tau^2 + sigma^2 / n_g) (ybar_g - mu), its
    # conditional variance 1 / (1 / tau^2 + n_g / sigma^2), at the fitted tau, sigma and mu.
    rng = np.random.default_rng(2)
    g = np.repeat(np.array(["c", "a", "b", "d"]), [3, 5, 8, 4])
    y = rng.normal(1.0, 1.0, g.size) + np.select([g == "a", g == "b"], [1.0, -1.0], 0.0)
    r = sagd.glmm(y, None, g)
    assert r.ranef.shape == (4, 1) and r.ranef_sd.shape == (4, 1)
    tau2, s2, mu = r.random_sd[0] ** 2, r.sigma ** 2, r.fixed[0]
    for j, label in enumerate(r.groups):
        rows = y[g == label]
        shrink = tau2 / (tau2 + s2 / rows.size)
        assert abs(r.ranef[j, 0] - shrink * (rows.mean() - mu)) < 1e-8
        assert abs(r.ranef_sd[j, 0] - (1 / tau2 + rows.size / s2) ** -0.5) < 1e-8
    # Several factors: one array per factor, in its labels' order.
    h = np.arange(g.size) % 3
    r2 = sagd.glmm(y, None, {"g": g, "h": h})
    assert set(r2.ranef) == {"g", "h"} and r2.ranef["h"].shape == (3, 1)
    # The Gaussian posterior's mean is its mode, crossed or not.
    assert np.array_equal(r.ranef_mean, r.ranef) and np.array_equal(r.ranef_mean_sd, r.ranef_sd)
    assert all(np.array_equal(r2.ranef_mean[f], r2.ranef[f]) for f in "gh")


def test_ranef_mean_is_the_posterior_mean_of_a_poisson_fit():
    # Small counts in small groups: p(b | y) is skewed, so its mean is not its mode. The
    # reference is the trapezoid rule on a fine grid of b at the fitted beta and tau.
    rng = np.random.default_rng(5)
    g = np.repeat(np.arange(12), 3)
    x = rng.normal(size=g.size)
    y = rng.poisson(np.exp(-0.5 + 0.3 * x + rng.normal(0, 0.8, 12)[g])).astype(float)
    X = np.column_stack([np.ones(g.size), x])
    r = sagd.glmm(y, X, g, family="poisson")
    assert r.method == "exact", r
    beta, tau = r.fixed, r.random_sd[0]
    gap = 0.0
    for j in range(12):
        rows = g == r.groups[j]
        mode, sd = r.ranef[j, 0], r.ranef_sd[j, 0]
        b = mode + sd * np.linspace(-15, 15, 30001)
        eta = (X[rows] @ beta)[:, None] + b[None, :]
        lp = (y[rows, None] * eta - np.exp(eta)).sum(axis=0) - 0.5 * b**2 / tau**2
        w = np.exp(lp - lp.max())
        mean = (b * w).sum() / w.sum()
        post_sd = np.sqrt(((b - mean) ** 2 * w).sum() / w.sum())
        # 100 adaptive nodes: within 1e-9 of the sd (the core's tests measure its error).
        assert abs(r.ranef_mean[j, 0] - mean) < 1e-9 * post_sd, (j, r.ranef_mean[j], mean)
        assert abs(r.ranef_mean_sd[j, 0] - post_sd) < 1e-9 * post_sd, (j, post_sd)
        gap = max(gap, abs(mean - mode) / post_sd)
    assert gap > 0.05, gap
    assert np.all(r.ranef_mean_mcse == 0)
    # Crossed factors share one block of 12 + 3 effects: the means are sampled (the core's
    # tests hold them to exact references within their Monte Carlo errors), or left out.
    crossed = {"g": g, "h": np.arange(g.size) % 3}
    r2 = sagd.glmm(y, X, crossed, family="poisson", seed=1)
    for f in "gh":
        mean, mode, sd = r2.ranef_mean[f], r2.ranef[f], r2.ranef_sd[f]
        mcse = r2.ranef_mean_mcse[f]
        assert mean.shape == mode.shape == mcse.shape and np.all(mcse > 0), (f, mcse)
        assert np.all(mcse < 0.05 * r2.ranef_mean_sd[f]), (f, mcse)
        assert np.all(np.abs(mean - mode) < 0.5 * sd), (f, mean, mode)
    # The means' chains mixed. (The fit's log-sd of h lands at -3.6, nearly on the boundary
    # with 3 levels, where its standard error, 7.4, carried 19% of Monte Carlo error after 40
    # draws a chain: the fit may warn of that.)
    assert r2.warning is None or "R-hat" not in r2.warning, r2.warning
    with pytest.raises(ValueError, match="ranef_draws: 5"):
        sagd.glmm(y, X, crossed, family="poisson", ranef_draws=5)
    r3 = sagd.glmm(y, X, crossed, family="poisson", seed=1, ranef_draws=0)
    assert r3.ranef_mean is None and r3.ranef_mean_sd is None and r3.ranef is not None
    assert all(np.array_equal(r3.ranef[f], r2.ranef[f]) for f in "gh")


def test_absurd_or_silently_coerced_arguments_are_refused_by_name():
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(10), 4)
    y = rng.poisson(2.0, size=40).astype(float)
    for kwargs, says in [({"seed": 1.9}, "seed: 1.9 is not a whole number"),
                         ({"threads": 100000}, "threads"),
                         ({"threads": 0}, "threads: 0; give at least 1"),
                         ({"max_msteps": 2.5}, "max_msteps: 2.5 is not a whole number")]:
        with pytest.raises(ValueError, match=says):
            sagd.glmm(y, None, g, family="poisson", **kwargs)
    with pytest.raises(ValueError, match="missing label"):
        sagd.glmm(y, None, np.where(g == 3, np.nan, g.astype(float)), family="poisson")
    with pytest.raises(ValueError, match="mixed types"):
        sagd.glmm(y, None, np.array([1, "a"] * 20, dtype=object), family="poisson")
    with pytest.raises(ValueError, match="n_points: 30.9 is not a whole number"):
        sagd.fit(lambda th, p, z: (None, None, None), [0.0], n_points=30.9, latent_dim=1)
