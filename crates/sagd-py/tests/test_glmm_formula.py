"""lme4's formulas: each the same fit as the arrays it stands for, lme4's names, missing rows
dropped and said, and errors that name the formula's fault."""

from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("formulaic")

import sagd  # noqa: E402
from conftest import simulate  # noqa: E402


def frame(family, seed=1):
    y, X, g = simulate(family, groups=30, seed=seed)
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"y": y, "x": X[:, 1], "g": [f"s{j:02d}" for j in g],
                         "h": rng.integers(0, 6, size=len(y)),
                         "c": rng.choice(["low", "high"], size=len(y))})


def same(a, b):
    np.testing.assert_array_equal(a.estimate, b.estimate)
    np.testing.assert_array_equal(a.se, b.se)
    assert a.loglik == b.loglik


def test_a_random_intercept_is_the_arrays_fit():
    df = frame("poisson")
    r = sagd.glmm("y ~ x + (1 | g)", data=df, family="poisson")
    X = np.column_stack([np.ones(len(df)), df.x])
    same(r, sagd.glmm(df.y, X, df.g, family="poisson"))
    assert r.names[:2] == ["(Intercept)", "x"] and r.random_names == ["(Intercept)"]
    assert r.formula == "y ~ x + (1 | g)" and r.n_obs == len(df)
    assert "y ~ x + (1 | g)" in repr(r)


def test_slopes_independent_effects_and_crossed_factors():
    df = frame("gaussian")
    X = np.column_stack([np.ones(len(df)), df.x])
    same(sagd.glmm("y ~ x + (1 + x | g)", data=df),
         sagd.glmm(df.y, X, df.g, Z=X, correlated=True))
    same(sagd.glmm("y ~ x + (x || g)", data=df), sagd.glmm(df.y, X, df.g, Z=X))
    crossed = sagd.glmm("y ~ x + (1 | g) + (1 | h)", data=df)
    same(crossed, sagd.glmm(df.y, X, {"g": df.g, "h": df.h}))
    assert crossed.random_names == ["g: (Intercept)", "h: (Intercept)"]
    nested = sagd.glmm("y ~ x + (1 | h/g)", data=df)
    inner = (df.h.astype(str) + ":" + df.g).to_numpy()
    same(nested, sagd.glmm(df.y, X, {"h": df.h, "h:g": inner}))


def test_binomial_successes_and_failures():
    df = frame("binomial")
    df["n"] = 3
    df["s"] = (df.y + (df.x > 0)).astype(int)
    r = sagd.glmm("cbind(s, n - s) ~ x + (1 | g)", data=df, family="binomial")
    X = np.column_stack([np.ones(len(df)), df.x])
    same(r, sagd.glmm(df.s, X, df.g, family="binomial", trials=df.n))


def test_categorical_columns_and_missing_rows():
    df = frame("poisson")
    df.loc[[3, 17], "x"] = np.nan
    r = sagd.glmm("y ~ x + c + (1 | g)", data=df, family="poisson")
    assert r.names[:3] == ["(Intercept)", "x", "c[T.low]"]
    assert r.n_obs == len(df) - 2
    assert "2 rows with a missing value dropped" in r.warning
    kept = df.dropna()
    X = np.column_stack([np.ones(len(kept)), kept.x, kept.c == "low"])
    same(r, sagd.glmm(kept.y, X, kept.g, family="poisson"))


def test_an_offset_is_the_arrays_fit_with_it_and_matches_glmer():
    # The CLI's exposure data; glmer(y ~ x + offset(log(exposure)) + (1 | site), poisson,
    # nAGQ = 25), lme4 1.1-31: (Intercept) 0.5098330583, x 0.4327953112, sd 0.4706889855.
    path = (Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data"
            / "glmm_exposure.csv")
    df = pd.read_csv(path)
    df.loc[5, "exposure"] = np.nan
    r = sagd.glmm("y ~ x + offset(log(exposure)) + (1 | site)", data=df, family="poisson")
    kept = df.dropna()
    X = np.column_stack([np.ones(len(kept)), kept.x])
    arrays = sagd.glmm(kept.y, X, kept.site, family="poisson", offset=np.log(kept.exposure))
    same(r, arrays)
    assert r.n_obs == len(df) - 1
    # The same offset written twice counts once, as in R.
    same(r, sagd.glmm("y ~ x + offset(log(exposure)) + offset(log( exposure )) + (1 | site)",
                      data=df, family="poisson"))
    # The argument and the formula's term are summed, as R sums them: log(t) twice is log(t²).
    both = sagd.glmm("y ~ x + offset(log(exposure)) + (1 | site)", data=df, family="poisson",
                     offset=np.log(df.exposure))
    same(both, sagd.glmm(kept.y, X, kept.site, family="poisson",
                         offset=2 * np.log(kept.exposure)))
    theta = arrays.estimate
    assert sagd.glmm_loglik(theta, kept.y, X, kept.site, family="poisson",
                            offset=np.log(kept.exposure))[0] == pytest.approx(arrays.loglik,
                                                                              abs=1e-9)
    # The whole file, as glmer fitted it.
    full = sagd.glmm("y ~ x + offset(log(exposure)) + (1 | site)", data=pd.read_csv(path),
                     family="poisson")
    np.testing.assert_allclose(full.fixed, [0.5098330583, 0.4327953112], atol=2e-5)
    np.testing.assert_allclose(full.random_sd[0], 0.4706889855, atol=2e-5)
    # Each count's fit against lme4's predict, fitted and residuals (pearson scaled, deviance)
    # at rows 1, 2 and 240 of the file, and quantile(summary(fit)$residuals).
    lme4 = {0: [0.0802522036325112, 1.08356031106352, -0.0835603110635179,
                -0.0802737410992908, -0.0813401184042237],
            1: [1.36564524286605, 3.91825045966563, -0.91825045966563, -0.463890050424818,
                -0.484048751825311],
            239: [1.00050209823108, 2.71964701565706, -1.71964701565706, -1.04275682283827,
                  -1.19928721949829]}
    for i, want in lme4.items():
        got = [full.eta[i], full.fitted[i], full.resid_response[i], full.resid_pearson[i],
               full.resid_deviance[i]]
        np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_allclose(full.resid_quantiles, [-2.7667920218, -0.8130055041,
                                                      -0.1257351473, 0.6720093047,
                                                      4.1767411684], atol=1e-4)
    assert "scaled residuals" in repr(full)
    # With a row dropped, the values are those of the rows kept, which `rows` names.
    assert len(r.fitted) == r.n_obs and 5 not in r.rows and list(r.rows[:6]) == [0, 1, 2, 3, 4, 6]
    np.testing.assert_array_equal(r.fitted, arrays.fitted)
    assert arrays.rows is None
    # A zero exposure has no log; an offset of another length is named.
    df.loc[7, "exposure"] = 0.0
    with pytest.raises(ValueError, match="at data row 8"):
        sagd.glmm("y ~ x + offset(log(exposure)) + (1 | site)", data=df, family="poisson")
    with pytest.raises(ValueError, match="offset"):
        sagd.glmm(kept.y, X, kept.site, family="poisson", offset=np.zeros(3))


def test_what_is_wrong_with_a_formula_is_named():
    df = frame("poisson")
    for formula, says in [("y ~ x", "no random-effect term"),
                          ("y ~ x + (1 | school)", "no grouping column 'school'"),
                          ("count ~ x + (1 | g)", "no column 'count'"),
                          ("y ~ x + z + (1 | g)", "the fixed effects"),
                          ("y x + (1 | g)", "no single '~'")]:
        with pytest.raises(ValueError, match=says):
            sagd.glmm(formula, data=df, family="poisson")
    wrapped = df.assign(x=[f"np.float64({v})" for v in df.x])
    with pytest.raises(ValueError, match=r"column 'x' is text .*'np\.float64\("):
        sagd.glmm("y ~ x + (1 | g)", data=wrapped, family="poisson")
    with pytest.raises(ValueError, match="needs the data frame"):
        sagd.glmm("y ~ x + (1 | g)", family="poisson")
    with pytest.raises(ValueError, match="no X, groups"):
        sagd.glmm("y ~ x + (1 | g)", np.ones(len(df)), data=df, family="poisson")
    with pytest.raises(ValueError, match="only with a formula"):
        sagd.glmm(df.y, None, df.g, family="poisson", data=df)


def test_profile_intervals_are_lme4_s_and_what_cannot_be_profiled_is_said():
    # R 4.2.2, lme4 1.1-31: confint(glmer(count ~ x + dose + (1 | site), poisson, nAGQ = 25))
    # and confint(lmer(..., REML = FALSE)), lme4's profile interpolated by a spline.
    path = (Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data"
            / "glmm_counts.csv")
    df = pd.read_csv(path)
    formula = "count ~ x + dose + (1 | site)"
    r = sagd.glmm(formula, data=df, family="poisson", profile=0.95)
    want = {"(Intercept)": (0.23665239, 0.83249400), "x": (0.20478772, 0.43151390),
            "dose[T.high]": (-1.00093898, -0.31226814), "dose[T.low]": (-0.30252315, 0.20643890),
            "sd (Intercept)": (0.44277413, 0.85831945)}
    assert list(r.confint) == list(want) and r.confint_level == 0.95
    for name, ends in want.items():
        np.testing.assert_allclose(r.confint[name], ends, atol=1e-5)
    assert "profile confidence intervals (95%" in repr(r)
    g = sagd.glmm(formula, data=df, profile=0.95)
    np.testing.assert_allclose(g.confint["sd (Intercept)"], (1.04697384, 1.90901718), atol=1e-5)
    np.testing.assert_allclose(g.confint["sigma"], (1.25878250, 1.58029605), atol=1e-5)
    assert sagd.glmm(formula, data=df).confint is None
    for bad, says in [(dict(profile=1.5), "between 0 and 1"), (dict(profile=0.9, reml=True), "reml"),
                      (dict(profile=0.9, method="em"), "method='em'")]:
        with pytest.raises(ValueError, match=says):
            sagd.glmm(formula, data=df, **bad)
    # Crossed counts fall back to Langevin chains: no intervals, and the warning says why.
    crossed = sagd.glmm("count ~ x + (1 | site) + (1 | dose)", data=df, family="poisson",
                        profile=0.95, ranef_draws=0, max_msteps=3)
    assert crossed.confint is None and "no profile intervals" in crossed.warning
    # Correlated slopes (ML): every sd and the correlation, as lme4's .sig entries; the
    # correlation's lower end where lme4's own deviance function, minimised over the sds with
    # the correlation held, rises through 3.8415 (between 0.1005 and 0.1025; lme4's confint
    # interpolates it linearly to 0.0567), its upper end 1 as lme4's.
    slopes = sagd.glmm("count ~ x + dose + (1 + x | site)", data=df, profile=0.95)
    ci = slopes.confint
    assert list(ci)[4:] == ["sd (Intercept)", "sd x", "cor (Intercept):x", "sigma"]
    np.testing.assert_allclose(ci["sd (Intercept)"], (1.08525248875, 1.9639612854), atol=1e-4)
    lo, hi = ci["cor (Intercept):x"]
    assert 0.1005 < lo < 0.1025 and hi == 1.0
