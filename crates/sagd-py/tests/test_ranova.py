"""sagd.ranova against lmerTest 3.1-3's ranova(fit) (R 4.2.2, lme4 1.1-31): the references of
crates/sagd-cli/tests/glmm_deletions.rs, and a categorical slope left out whole; sagd.drop1
against lme4 1.1-31's drop1(fit, test = "Chisq"), the same file's references."""

from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("formulaic")

import sagd  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data"

# Per fit: each row's name, npar, logLik (REML's for a REML fit), then LRT, Df and p.
LMERTEST = {
    ("y ~ A * B + x + (1 | subj)", "glmm_factorial.csv", True, None): [
        ("<none>", 9, -106.914802275),
        ("(1 | subj)", 8, -115.205095563, 16.5805865756, 1, 4.66258651185e-05)],
    ("y ~ A * B + x + (1 | subj)", "glmm_factorial.csv", False, None): [
        ("<none>", 9, -101.330441309),
        ("(1 | subj)", 8, -110.169648823, 17.678415027, 1, 2.61578131372e-05)],
    ("count ~ x * dose + (1 + x | site)", "glmm_counts.csv", True, None): [
        ("<none>", 10, -343.055928870),
        ("x in (1 + x | site)", 8, -346.135325056, 6.15879237244, 2, 0.0459870158613)],
    ("count ~ x + (1 + x || site)", "glmm_counts.csv", True, None): [
        ("<none>", 5, -351.850131961),
        ("(1 | site)", 4, -385.189617238, 66.67897055394, 1, 3.19525673497e-16),
        ("x in (0 + x | site)", 4, -352.588474996, 1.47668606819, 1, 0.224293738339)],
    ("y ~ x + (1 | site)", "glmm_weights.csv", True, "w"): [
        ("<none>", 4, -80.453252454),
        ("(1 | site)", 3, -120.373115858, 79.8397268091, 1, 4.0604598204e-19)],
    # A categorical slope goes whole, as lmerTest leaves out the variable.
    ("y ~ x + (1 + B | subj)", "glmm_factorial.csv", True, None): [
        ("<none>", 6, -125.4541588),
        ("B in (1 + B | subj)", 4, -125.9063590, 0.904400406, 2, 0.6362267825)],
}


def test_ranova_is_lmertest_s():
    for (formula, file, reml, weights), want in LMERTEST.items():
        df = pd.read_csv(DATA / file).dropna()
        r = sagd.ranova(sagd.glmm(formula, data=df, reml=reml, weights=weights))
        assert r.names == [w[0] for w in want] and r.reml == reml
        assert r.n_params == [w[1] for w in want]
        np.testing.assert_allclose(r.loglik, [w[2] for w in want], rtol=1e-7)
        np.testing.assert_allclose(r.aic, [-2 * w[2] + 2 * w[1] for w in want], rtol=1e-7)
        assert r.lrt[0] is None and r.df[0] is None and r.p_value[0] is None
        for k, w in enumerate(want[1:], start=1):
            assert r.df[k] == w[4]
            np.testing.assert_allclose([r.lrt[k], r.p_value[k]], [w[3], w[5]], rtol=1e-4)
        assert "Pr(>Chisq)" in repr(r)


def test_ranova_refuses_what_it_cannot_test():
    df = pd.read_csv(DATA / "glmm_counts.csv").dropna()
    with pytest.raises(ValueError, match="Gaussian"):
        sagd.ranova(sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson"))
    with pytest.raises(ValueError, match="sagd.glmm"):
        sagd.ranova("not a fit")


# Per fit: each row's name, the parameters it drops, lme4's AIC (None for glmer's AGQ fits,
# whose AIC lacks constants the exact likelihood has), then LRT and p.
DROP1 = {
    ("y ~ A * B + x + (1 | subj)", "glmm_factorial.csv", True, None): [
        ("<none>", 0, 220.6608826186),
        ("x", 1, 229.6350054636, 10.97412284, 0.00092392977),
        ("A:B", 2, 218.8459354476, 2.185052829, 0.3353681436)],
    ("y ~ x * A + B + (1 | subj)", "glmm_factorial.csv", False, None): [
        ("<none>", 0, 222.6114107559),
        ("B", 1, 242.6775784224, 22.06616767, 2.634116435e-06),
        ("x:A", 2, 218.8459354476, 0.2345246916, 0.8893518448)],
    ("count ~ x + dose + (1 | site)", "glmm_counts.csv", False, "poisson"): [
        ("<none>", 0, None),
        ("x", 1, None, 31.16036685, 2.375672357e-08),
        ("dose", 2, None, 16.29104394, 0.0002900312243)],
}


def test_drop1_is_lme4_s():
    for (formula, file, reml, family), want in DROP1.items():
        df = pd.read_csv(DATA / file).dropna()
        fit = sagd.glmm(formula, data=df, reml=reml, family=family or "gaussian")
        r = sagd.drop1(fit)
        assert r.names == [w[0] for w in want] and r.refitted_by_ml == reml
        assert [r.n_params[0] - n for n in r.n_params] == [w[1] for w in want]
        for k, w in enumerate(want):
            if w[2] is not None:
                assert r.aic[k] == pytest.approx(w[2], rel=1e-7)
            if k > 0:
                assert r.df[k] == w[1]
                np.testing.assert_allclose([r.lrt[k], r.p_value[k]], w[3:], rtol=1e-4)
        assert "lme4's drop1" in repr(r) and ("refitted by ML" in repr(r)) == reml
    with pytest.raises(ValueError, match="no fixed-effect term"):
        sagd.drop1(sagd.glmm("count ~ 1 + (1 | site)", data=df, family="poisson"))
    with pytest.raises(ValueError, match="sagd.glmm"):
        sagd.drop1("not a fit")
