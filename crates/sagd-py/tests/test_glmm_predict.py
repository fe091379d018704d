"""`GlmmResult.predict`: new rows against lme4 1.1-31's ``predict(fit, newdata,
allow.new.levels = TRUE)`` (the references of ``crates/sagd-cli/tests/glmm_predict.rs``), the
formula and the arrays giving the same, and new rows the fit cannot predict refused by name."""

from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("formulaic")

import sagd  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data"

# glmer(count ~ x + dose + (1 | site), poisson, nAGQ = 25) on glmm_counts.csv, predicting
# glmm_counts_new.csv: eta, the mean, and eta without the levels (re.form = NA).
LME4 = np.array([
    [0.461278165181, 1.586099987714, 0.656546943482],
    [-0.615593677245, 0.540320024368, -0.484851990813],
    [0.577354797358, 1.781320240210, 0.577354797358],
    [0.340170604557, 1.405187301472, 0.340170604557],
    [1.537940187821, 4.654991979871, 0.402693837214],
])


@pytest.fixture(scope="module")
def fit():
    df = pd.read_csv(DATA / "glmm_counts.csv")
    return df, sagd.glmm("count ~ x + dose + (1 | site)", data=df, family="poisson")


def test_new_rows_are_predicted_as_glmer_predicts_them(fit):
    _, r = fit
    new = pd.read_csv(DATA / "glmm_counts_new.csv")
    np.testing.assert_allclose(r.predict(new), LME4[:, 0], atol=5e-5)
    np.testing.assert_allclose(r.predict(new, type="response"), LME4[:, 1], atol=5e-5)
    np.testing.assert_allclose(r.predict(new, conditional=False), LME4[:, 2], atol=5e-5)
    # Without the response, and with a row missing a predictor: NaN there, the rest the same.
    blank = new.drop(columns="count")
    blank.loc[1, "x"] = np.nan
    got = r.predict(blank)
    assert np.isnan(got[1])
    np.testing.assert_array_equal(np.delete(got, 1), np.delete(r.predict(new), 1))
    # No new rows: the fit's own.
    np.testing.assert_array_equal(r.predict(), r.eta)
    np.testing.assert_array_equal(r.predict(type="response"), r.fitted)


def test_arrays_predict_as_the_formula_does(fit):
    df, r = fit
    kept = df.dropna()

    def design(d):
        return np.column_stack([np.ones(len(d)), d.x, d.dose == "high", d.dose == "low"])

    a = sagd.glmm(kept["count"].to_numpy(), design(kept), kept.site.to_numpy(),
                  family="poisson")
    new = pd.read_csv(DATA / "glmm_counts_new.csv")
    got = a.predict(X=design(new), groups=new.site.to_numpy())
    np.testing.assert_allclose(got, r.predict(new), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="groups"):
        a.predict(X=design(new))


def test_rows_the_fit_cannot_predict_are_refused_by_name(fit):
    _, r = fit
    new = pd.DataFrame({"x": [0.1, 0.2], "dose": ["low", "medium"], "site": ["site 0"] * 2})
    with pytest.raises(ValueError, match="medium"):
        r.predict(new)
    with pytest.raises(ValueError, match="no column 'dose'"):
        r.predict(new.drop(columns="dose"))
    with pytest.raises(ValueError, match="type"):
        r.predict(new.iloc[:1], type="mean")
    with pytest.raises(ValueError, match="newdata=df alone"):
        r.predict(new, X=np.ones((2, 4)))


def _gaussian_groups():
    """A Gaussian random intercept (sd 0.7, sigma 0.5) of 20 groups of 6 rows: y, X, groups."""
    rng = np.random.default_rng(4)
    g = np.repeat(np.arange(20), 6)
    x = rng.normal(size=g.size)
    y = 1.0 + 0.5 * x + rng.normal(size=20)[g] * 0.7 + rng.normal(size=g.size) * 0.5
    return y, np.column_stack([np.ones_like(x), x]), g


def test_simulations_have_the_fitted_model_s_moments():
    y, X, g = _gaussian_groups()
    r = sagd.glmm(y, X, g, simulate=3000, seed=3)
    sims = r.simulations
    assert sims.shape == (3000, g.size)
    np.testing.assert_array_equal(sims, sagd.glmm(y, X, g, simulate=3000, seed=3).simulations)
    # Each row: mean x_i beta, variance tau^2 + sigma^2 (the sds fitted); five Monte Carlo
    # errors of each.
    var = r.random_sd[0] ** 2 + r.sigma ** 2
    n = sims.shape[0]
    assert np.all(np.abs(sims.mean(axis=0) - X @ r.fixed) < 5 * np.sqrt(var / n))
    assert np.all(np.abs(sims.var(axis=0, ddof=1) - var) < 5 * var * np.sqrt(2 / n))
    with pytest.raises(ValueError, match="simulate"):
        sagd.glmm(y, X, g, simulate=0)


def test_the_fit_simulates_afresh_or_at_its_levels_modes():
    y, X, g = _gaussian_groups()
    r = sagd.glmm(y, X, g, simulate=50, seed=3)
    # The method draws what sagd.glmm(simulate=) drew from the same seed, on any threads.
    np.testing.assert_array_equal(r.simulate(50, seed=3, threads=1), r.simulations)
    # Conditional draws (lme4's use.u = TRUE): each row N(fitted_i, sigma^2), the levels'
    # effects at their modes; five Monte Carlo errors of each row's mean and variance.
    sims = r.simulate(3000, seed=8, conditional=True)
    n, var = sims.shape[0], r.sigma ** 2
    assert sims.shape == (3000, g.size)
    assert np.all(np.abs(sims.mean(axis=0) - r.fitted) < 5 * np.sqrt(var / n))
    assert np.all(np.abs(sims.var(axis=0, ddof=1) - var) < 5 * var * np.sqrt(2 / n))
    with pytest.raises(ValueError, match="nsim"):
        r.simulate(0)


def test_prior_weights_fit_as_lmer_fits_them():
    """lme4 1.1-31's lmer(y ~ x + (1 | site), weights = w, REML = FALSE) on glmm_weights.csv
    (the reference of crates/sagd-cli/tests/glmm_fitted.rs): beta, the sds and the
    log-likelihood; the formula's column name and the arrays give the same fit."""
    df = pd.read_csv(DATA / "glmm_weights.csv")
    r = sagd.glmm("y ~ x + (1 | site)", data=df, weights="w")
    np.testing.assert_allclose(r.fixed, [0.768485129871, 0.513035185089], atol=1e-7)
    np.testing.assert_allclose([r.random_sd[0], r.sigma], [0.704721656834, 0.727599559139],
                               atol=1e-6)
    assert abs(r.loglik - -77.7018135966) < 1e-8
    X = np.column_stack([np.ones(len(df)), df.x])
    arrays = sagd.glmm(df.y.to_numpy(), X, df.site.to_numpy(), weights=df.w.to_numpy())
    np.testing.assert_array_equal(arrays.estimate, r.estimate)
    # Unweighted, the fit is another.
    assert abs(sagd.glmm("y ~ x + (1 | site)", data=df).loglik - r.loglik) > 1
    with pytest.raises(ValueError, match="no column 'v'"):
        sagd.glmm("y ~ x + (1 | site)", data=df, weights="v")
    with pytest.raises(ValueError, match="Gaussian family"):
        sagd.glmm("y ~ x + (1 | site)", data=df.assign(y=df.w), weights="w", family="poisson")
    with pytest.raises(ValueError, match="positive"):
        sagd.glmm("y ~ x + (1 | site)", data=df.assign(w=df.w - 1.0), weights="w")


def test_binomial_weights_are_trials_as_glmer_reads_them():
    """lme4 1.1-31's glmer(prop ~ x + (1 | site), weights = n, family = binomial, nAGQ = 25) on
    glmm_proportions.csv (the reference of crates/sagd-cli/tests/glmm_fitted.rs): beta, the sd
    and the exact log-likelihood; the same fit as cbind(s, f); simulations as proportions of n,
    as lme4's simulate gives them; trials beside weights, and weights that are not whole
    trials, refused by name."""
    df = pd.read_csv(DATA / "glmm_proportions.csv")
    r = sagd.glmm("prop ~ x + (1 | site)", data=df, family="binomial", weights="n", simulate=5)
    np.testing.assert_allclose(r.fixed, [-0.379607838497, 0.674348776221], atol=1e-6)
    assert abs(r.random_sd[0] - 0.655906188943) < 1e-6
    assert abs(r.loglik - -179.80785245198) < 1e-8
    counts = sagd.glmm("cbind(s, f) ~ x + (1 | site)", data=df, family="binomial")
    np.testing.assert_array_equal(counts.estimate, r.estimate)
    n = df.n.to_numpy()
    for sims in (r.simulations, r.simulate(5, seed=3)):
        assert np.all((sims >= 0) & (sims <= 1))
        np.testing.assert_allclose(sims * n, np.round(sims * n), atol=1e-9)
    X = np.column_stack([np.ones(len(df)), df.x])
    with pytest.raises(ValueError, match="not both"):
        sagd.glmm(df.prop.to_numpy(), X, df.site.to_numpy(), family="binomial",
                  trials=n, weights=n)
    with pytest.raises(ValueError, match="whole number"):
        sagd.glmm("prop ~ x + (1 | site)", data=df, family="binomial", weights=n + 0.5)


def test_satterthwaite_tests_are_lmertest_s():
    """lmerTest 3.1-3's summary(lmer(count ~ x * dose + (1 + x | site), REML = TRUE)) on
    glmm_counts.csv (the reference of crates/sagd-cli/tests/glmm_ddf.rs): each fixed
    effect's standard error, Satterthwaite's degrees of freedom and p-value; other families
    refused by name."""
    df = pd.read_csv(DATA / "glmm_counts.csv").dropna()
    r = sagd.glmm("count ~ x * dose + (1 + x | site)", data=df, reml=True, ddf="satterthwaite")
    lmertest = np.array([
        [0.325529380617, 46.1385327864, 2.56695316639e-08],
        [0.200407585302, 63.1822914510, 2.31957687763e-04],
        [0.284970157699, 151.1124505586, 1.75535495202e-03],
        [0.270736573938, 143.4894045321, 7.90134925587e-01],
        [0.294306710652, 99.9411829810, 1.21889490207e-01],
        [0.266397507334, 153.4368952777, 5.35793528451e-01],
    ])
    np.testing.assert_allclose(r.satterthwaite, lmertest, rtol=1e-4)
    assert sagd.glmm("count ~ x + (1 | site)", data=df).satterthwaite is None
    with pytest.raises(ValueError, match="Gaussian family"):
        sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson", ddf="satterthwaite")
