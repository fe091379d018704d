"""sagd.glmm(..., ls_means=...) against lmerTest 3.1-3's ls_means (R 4.2.2, lme4 1.1-31,
pbkrtest 0.5.2) and a Poisson fit's Wald means against glmer's (nAGQ = 25); the same
references as the command line's crates/sagd-cli/tests/glmm_ls_means.rs."""

from pathlib import Path

import math

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("formulaic")

import sagd  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data"
FACTORIAL = "y ~ A * B + x + (1 | subj)"

# lmerTest's ls_means(lmer(y ~ A * B + x + (1 | subj), REML = TRUE)) with A and B factors:
# name -> (estimate, se, df, lower, upper, p).
SATTERTHWAITE = {
    "Ahi": (3.17120636997, 0.191114748772, 35.8966195794, 2.78356893138, 3.55884380857,
            2.04397299071e-18),
    "Bno": (2.14420220263, 0.157662443994, 18.0924426899, 1.8130869708, 2.47531743446,
            6.10736356984e-11),
    "Alo:Byes": (2.48506675519, 0.236960371587, 61.59649712, 2.01132799026, 2.95880552012,
                 2.48777424937e-15),
}
KENWARD_ROGER = {
    "Amid": (2.28057833149, 0.187402941693, 34.3418819457, 1.89986933733, 2.66128732565,
             5.24300694163e-14),
    "Ahi:Byes": (3.67302208151, 0.282836746907, 75.76120787, 3.1096751647, 4.23636899831,
                 5.89219048061e-21),
}
PAIRWISE = {
    "Alo - Amid": (-0.0543162400875, 0.184296482869, 71.070336957, -0.421786687502,
                   0.313154207327, 0.769065391347),
    "Alo:Bno - Alo:Byes": (-0.517609327578, 0.257751203137, 72.8822453769, -1.03132071757,
                           -0.00389793758602, 0.0483312499311),
}
# glmer(count ~ x + dose + (1 | site), poisson, nAGQ = 25): L beta and sqrt(L V L'), x at its
# mean over the model's rows.
WALD = {
    "dosectl": (0.544805936435, 0.149268735481, math.inf, 0.252244590873, 0.837367281996,
                0.000262410994313),
    "dosehigh": (-0.104889554052, 0.185868305181, math.inf, -0.469184738074, 0.259405629971,
                 0.572535083727),
}


def check(table, want, tol):
    """Each reference row of `want` in `table`: the estimate and ends within `tol`, the
    standard error within `tol` of itself, the degrees of freedom within 10 `tol` of
    themselves, p within 1e-3 of itself."""
    for name, (e, se, df, lo, hi, p) in want.items():
        k = table.names.index(name)
        assert table.estimate[k] == pytest.approx(e, abs=tol), name
        assert table.se[k] == pytest.approx(se, rel=tol), name
        assert table.df[k] == pytest.approx(df, rel=10 * tol), name
        assert (table.lower[k], table.upper[k]) == pytest.approx((lo, hi), abs=tol), name
        assert table.p_value[k] == pytest.approx(p, rel=1e-3), name


def test_ls_means_are_lmertest_s():
    df = pd.read_csv(DATA / "glmm_factorial.csv")
    r = sagd.glmm(FACTORIAL, data=df, reml=True, ls_means=True)
    m = r.ls_means
    assert (m.ddf, m.pairwise, m.level) == ("satterthwaite", False, 0.95)
    assert m.names[:5] == ["Ahi", "Alo", "Amid", "Bno", "Byes"]
    assert m.terms[5:] == ["A:B"] * 6 and len(m.names) == 11
    check(m, SATTERTHWAITE, 1e-6)
    assert "least-squares means (lmerTest's ls_means; Satterthwaite's" in repr(r)
    assert list(m.to_pandas().index[:2]) == ["Ahi", "Alo"]
    kr = sagd.glmm(FACTORIAL, data=df, reml=True, ddf="kenward-roger", ls_means="means")
    assert kr.ls_means.ddf == "kenward_roger"
    check(kr.ls_means, KENWARD_ROGER, 1e-6)


def test_pairwise_differences_are_lmertest_s():
    df = pd.read_csv(DATA / "glmm_factorial.csv")
    m = sagd.glmm(FACTORIAL, data=df, reml=True, ls_means="pairwise").ls_means
    assert m.pairwise and m.names[:4] == ["Ahi - Alo", "Ahi - Amid", "Alo - Amid", "Bno - Byes"]
    assert len(m.names) == 3 + 1 + 15
    check(m, PAIRWISE, 1e-6)


def test_a_glmm_s_means_are_wald_z_on_the_link_scale():
    df = pd.read_csv(DATA / "glmm_counts.csv")
    m = sagd.glmm("count ~ x + dose + (1 | site)", data=df, family="poisson",
                  ls_means=True).ls_means
    assert m.ddf == "wald"
    check(m, WALD, 5e-5)
    assert "z value" in repr(m)
    # C(dose) is the same variable, named as written.
    c = sagd.glmm("count ~ x + C(dose) + (1 | site)", data=df, family="poisson",
                  ls_means=True).ls_means
    assert c.names == ["C(dose)ctl", "C(dose)high", "C(dose)low"]
    assert c.estimate == pytest.approx(m.estimate, rel=1e-9)


def test_a_binomial_fit_s_means_on_the_response_scale_are_probabilities_and_odds_ratios():
    # glmer(yb ~ A + (1 | subj), binomial, nAGQ = 25), yb = y > 2.5 on glmm_factorial.csv:
    # plogis(L beta), its delta-method se and plogis of the link's ends; the odds ratio
    # exp(d), exp(d) se(d) and exp of the ends.
    df = pd.read_csv(DATA / "glmm_factorial.csv")
    df["yb"] = (df["y"] > 2.5).astype(int)
    probs = {"Ahi": (0.712970590829, 0.103483628451, 0.479697617041, 0.870000727022),
             "Alo": (0.323471850279, 0.108057281333, 0.153728923305, 0.557229347781),
             "Amid": (0.360789646297, 0.113122404755, 0.177507449823, 0.596150253489)}
    m = sagd.glmm("yb ~ A + (1 | subj)", data=df, family="binomial", ls_means=True,
                  ls_means_scale="response").ls_means
    assert m.scale == "response" and "on the response scale" in repr(m)
    for name, want in probs.items():
        k = m.names.index(name)
        got = (m.estimate[k], m.se[k], m.lower[k], m.upper[k])
        assert got == pytest.approx(want, rel=2e-4), name
    pairs = sagd.glmm("yb ~ A + (1 | subj)", data=df, family="binomial", ls_means="pairwise",
                      ls_means_scale="response").ls_means
    assert pairs.names[0] == "Ahi / Alo"
    got = (pairs.estimate[0], pairs.se[0], pairs.lower[0], pairs.upper[0])
    assert got == pytest.approx((5.19510821292, 3.23318209694, 1.53408086436, 17.5930421733),
                                rel=2e-4)


def test_no_means_without_factor_terms_and_bad_options_are_refused():
    df = pd.read_csv(DATA / "glmm_factorial.csv")
    r = sagd.glmm("y ~ x + (1 | subj)", data=df, ls_means=True)
    assert r.ls_means is None
    assert "no least-squares means: the fixed effects have no term of categorical" in r.warning
    coded = sagd.glmm("y ~ C(A, contr.sum) + (1 | subj)", data=df, ls_means=True)
    assert coded.ls_means is None and "more than its column" in coded.warning
    for options, says in [(dict(ls_means="all"), "give 'means'"),
                          (dict(ls_means=True, ls_means_level=1.5), "between 0 and 1"),
                          (dict(ls_means=True, method="em"), "need the exact likelihood"),
                          (dict(ls_means_scale="response"), "give ls_means too"),
                          (dict(ls_means=True, ls_means_scale="log"), "give 'link'")]:
        with pytest.raises(ValueError, match=says):
            sagd.glmm(FACTORIAL, data=df, **options)
    with pytest.raises(ValueError, match="give the model as a formula"):
        sagd.glmm(df["y"].to_numpy(), df[["x"]].to_numpy(), df["subj"].to_numpy(),
                  ls_means=True)
