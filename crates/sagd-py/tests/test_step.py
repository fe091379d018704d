"""sagd.step against lmerTest 3.1-3's step(fit) (R 4.2.2, lme4 1.1-31): the references of
crates/sagd-cli/tests/glmm_deletions.rs's `step_is_lmertest_s`, so the command line and Python
are held to the same tables."""

from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("formulaic")

import sagd  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data"

# Per fit (REML): the random table's rows (name, round eliminated or None for the model as
# given, npar, logLik, then LRT and p), the fixed table's (name, round, Sum Sq, NumDF, DenDF,
# F, p) and the model found.
LMERTEST = {
    ("y ~ A * B + x + (1 | subj)", "glmm_factorial.csv", "satterthwaite"): (
        [("<none>", None, 9, -106.9148022751),
         ("(1 | subj)", 0, 8, -115.2050955629, 16.58058658, 4.662586512e-05)],
        [("A:B", 1, 0.9001587831, 2, 74.89681066, 1.022402021, 0.3646948356),
         ("A", 0, 15.12809247, 2, 72.39657023, 17.17687224, 7.854468341e-07),
         ("B", 0, 10.30775093, 1, 77.89428972, 23.40743503, 6.487476143e-06),
         ("x", 0, 4.672015968, 1, 78.67571393, 10.60948319, 0.001661622341)],
        "y ~ A + B + x + (1 | subj)"),
    ("count ~ x * dose + (1 + x || site)", "glmm_counts.csv", "satterthwaite"): (
        [("<none>", None, 9, -345.5020038083),
         ("x in (0 + x | site)", 1, 8, -346.1353250563, 1.266642496, 0.2603974916),
         ("(1 | site)", 0, 7, -377.7376031111, 63.20455611, 1.863169284e-15)],
        [("x:dose", 1, 3.91049534, 2, 152.8315419, 0.9701741285, 0.3813387841),
         ("x", 0, 63.82858357, 1, 152.7919704, 31.73040414, 8.285629719e-08),
         ("dose", 0, 29.68026376, 2, 153.9925689, 7.377312101, 0.0008717953131)],
        "count ~ x + dose + (1 | site)"),
    ("count ~ x * dose + (1 + x | site)", "glmm_counts.csv", "kenward-roger"): (
        [("<none>", None, 10, -343.0559288701),
         ("x in (1 + x | site)", 0, 8, -346.1353250563, 6.158792372, 0.04598701586)],
        [("x:dose", 1, 4.073123005, 2, 105.5703304, 1.101951125, 0.336012643),
         ("x", 0, 39.02950945, 1, 21.46031795, 20.98823386, 0.0001542108346),
         ("dose", 0, 22.78727229, 2, 151.106937, 6.125792027, 0.002766665832)],
        "count ~ x + dose + (1 + x | site)"),
}


def test_step_is_lmertest_s():
    for (formula, file, ddf), (random, fixed, found) in LMERTEST.items():
        df = pd.read_csv(DATA / file).dropna()
        r = sagd.step(sagd.glmm(formula, data=df, reml=True), ddf=ddf)
        assert r.random.names == [w[0] for w in random], formula
        assert r.random.eliminated == [w[1] for w in random], formula
        assert r.random.n_params == [w[2] for w in random], formula
        np.testing.assert_allclose(r.random.loglik, [w[3] for w in random], rtol=1e-7)
        for k, w in enumerate(random[1:], start=1):
            np.testing.assert_allclose([r.random.lrt[k], r.random.p_value[k]], w[4:], rtol=1e-4)
        t = r.fixed
        assert t.names == [w[0] for w in fixed] and t.eliminated == [w[1] for w in fixed]
        assert t.num_df == [w[3] for w in fixed], formula
        got = np.array([t.sum_sq, t.den_df, t.f_value, t.p_value]).T
        np.testing.assert_allclose(got, [[w[2], w[4], w[5], w[6]] for w in fixed], rtol=1e-4)
        assert r.model_found == found and r.ddf == ddf and r.note is None
        # The model found, fitted: the same fit as its formula's.
        again = sagd.glmm(found, data=df, reml=True)
        assert r.fit.reml_loglik == pytest.approx(again.reml_loglik, rel=1e-10)
        assert f"Model found:\n{found}" in repr(r)


def test_step_keeps_the_last_random_term_and_says_so():
    # Every group's mean the same: the group's variance is 0 and its test's p is 1.
    df = pd.DataFrame({"y": [[1.0, 2.0, 3.5][r % 3] for r in range(15)],
                       "x": [[0.3, -0.2, 0.9][r % 3] for r in range(15)],
                       "g": [f"g{r // 3}" for r in range(15)]})
    r = sagd.step(sagd.glmm("y ~ x + (1 | g)", data=df, reml=True))
    assert "last random term" in r.note and r.model_found == "y ~ x + (1 | g)"
    assert r.random.eliminated == [None, 0]


def test_step_refuses_what_it_cannot_reduce():
    df = pd.read_csv(DATA / "glmm_counts.csv").dropna()
    with pytest.raises(ValueError, match="Gaussian"):
        sagd.step(sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson"))
    with pytest.raises(ValueError, match="formula with data="):
        sagd.step("not a fit")
    fit = sagd.glmm("count ~ x + (1 | site)", data=df)
    with pytest.raises(ValueError, match="ddf"):
        sagd.step(fit, ddf="between-within")
    with pytest.raises(ValueError, match="alpha_fixed"):
        sagd.step(fit, alpha_fixed=0.0)
