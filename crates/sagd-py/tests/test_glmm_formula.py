"""lme4's formulas: each the same fit as the arrays it stands for, lme4's names, missing rows
dropped and said, and errors that name the formula's fault."""

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


def test_what_is_wrong_with_a_formula_is_named():
    df = frame("poisson")
    for formula, says in [("y ~ x", "no random-effect term"),
                          ("y ~ x + (1 | school)", "no grouping column 'school'"),
                          ("count ~ x + (1 | g)", "no column 'count'"),
                          ("y ~ x + z + (1 | g)", "the fixed effects"),
                          ("y x + (1 | g)", "no single '~'")]:
        with pytest.raises(ValueError, match=says):
            sagd.glmm(formula, data=df, family="poisson")
    with pytest.raises(ValueError, match="needs the data frame"):
        sagd.glmm("y ~ x + (1 | g)", family="poisson")
    with pytest.raises(ValueError, match="no X, groups"):
        sagd.glmm("y ~ x + (1 | g)", np.ones(len(df)), data=df, family="poisson")
    with pytest.raises(ValueError, match="only with a formula"):
        sagd.glmm(df.y, None, df.g, family="poisson", data=df)
