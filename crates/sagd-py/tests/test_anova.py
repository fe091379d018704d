"""sagd.anova against lme4's anova(m0, m1, ...) and the chi-square law's closed forms."""

from pathlib import Path

import math

import numpy as np

import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("formulaic")

import sagd  # noqa: E402
from sagd._anova import chi2_upper_tail  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data" / "glmm_counts.csv"


def test_the_chi_square_tail_is_r_s():
    # R: pchisq(c(0.5, 3, 12.3, 40), c(1, 4, 3, 7), lower.tail = FALSE).
    for x, df, want in [(0.5, 1, 0.479500122186953), (3.0, 4, 0.557825400371075),
                        (12.3, 3, 0.00642305757657794), (40.0, 7, 1.25879038737131e-06)]:
        assert chi2_upper_tail(x, df) == pytest.approx(want, rel=1e-12)
    assert chi2_upper_tail(-0.1, 2) == 1.0
    with pytest.raises(ValueError, match="whole number"):
        chi2_upper_tail(1.0, 0)


def test_nested_fits_are_tested_as_lme4_tests_them():
    # R 4.2.2, lme4 1.1-31, the file without its row of a missing count:
    # anova(glmer(count ~ x + (1 | site), poisson, nAGQ = 25), glmer(... + dose ...)):
    # Chisq 16.29104 on 2 Df, p 0.00029003; and lmer (REML = FALSE) of count ~ x, x * dose,
    # then x * dose with (1 + x | site): Chisq 16.47974 (4 Df, p 0.0024386), 6.00850 (2 Df,
    # p 0.0495759), logLik -351.0115225, -342.7716538, -339.7674029.
    df = pd.read_csv(DATA)
    m1 = sagd.glmm("count ~ x + dose + (1 | site)", data=df, family="poisson")
    m0 = sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson")
    a = sagd.anova(m1, m0)
    assert a.names == ["count ~ x + (1 | site)", "count ~ x + dose + (1 | site)"]
    assert a.n_params == [3, 5] and a.df == [None, 2]
    assert a.chisq[1] == pytest.approx(16.29104, abs=2e-4)
    assert a.p_value[1] == pytest.approx(0.00029003, rel=1e-3)
    assert a.warning is None
    g = [sagd.glmm(f, data=df) for f in ["count ~ x + (1 | site)", "count ~ x * dose + (1 | site)",
                                         "count ~ x * dose + (1 + x | site)"]]
    a = sagd.anova(*g)
    assert a.n_params == [4, 8, 10]
    assert a.loglik == pytest.approx([-351.0115225, -342.7716538, -339.7674029], abs=1e-5)
    assert a.chisq[1:] == pytest.approx([16.47974, 6.00850], abs=1e-4)
    assert a.p_value[1:] == pytest.approx([0.0024386, 0.0495759], rel=1e-4)
    assert "boundary" in a.warning
    assert "Pr(>Chisq)" in repr(a) and list(a.to_pandas()["Df"][1:]) == [4, 2]


def test_what_cannot_be_compared_is_refused_by_name():
    df = pd.read_csv(DATA)
    m = sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson")
    with pytest.raises(ValueError, match="two or more"):
        sagd.anova(m)
    import dataclasses

    reml = sagd.glmm("count ~ x + (1 | site)", data=df, reml=True)
    with pytest.raises(ValueError, match="REML and not by sagd.glmm here"):
        sagd.anova(m, dataclasses.replace(reml, _model=None))
    with pytest.raises(ValueError, match="same data and family"):
        sagd.anova(m, sagd.glmm("count ~ x + (1 | site)", data=df))
    with pytest.raises(ValueError, match="not a sagd.glmm fit"):
        sagd.anova(m, 3)
    assert math.isfinite(sagd.anova(m, m).chisq[1])


def test_reml_fits_are_compared_by_their_ml_refits_as_lme4s_anova_compares_them():
    """lme4 1.1-31's anova of two REML fits refits them by ML (the reference of
    crates/sagd-cli/tests/glmm_bootstrap.rs): logLik -341.0012367 and -339.7674029, Chisq
    2.46767 on 2 Df, p 0.29117; the REML fits themselves are left as they were."""
    df = pd.read_csv(DATA)
    m1 = sagd.glmm("count ~ x * dose + (1 + x | site)", data=df, reml=True)
    m0 = sagd.glmm("count ~ x + dose + (1 + x | site)", data=df, reml=True)
    a = sagd.anova(m1, m0)
    assert a.refitted_by_ml and "refitted by ML" in repr(a)
    assert a.loglik == pytest.approx([-341.0012367, -339.7674029], abs=1e-6)
    assert (a.df[1], a.chisq[1]) == (2, pytest.approx(2.46767, abs=1e-5))
    assert a.p_value[1] == pytest.approx(0.29117, abs=1e-5)
    assert m1.reml and m0.reml


def test_bootstrap_p_values_agree_with_pbkrtest():
    # A random slope's variance tested at 0, on its boundary, where the chi-square test is
    # conservative. R 4.2.2, lme4 1.1-31, pbkrtest 0.5.2, the file without its row of a missing
    # count, set.seed(1): PBmodcomp(glmer(count ~ x + (1 + x || site), poisson),
    # glmer(count ~ x + (1 | site), poisson), nsim = 400): p 0.1349 from the 377 samples it used
    # (39 s); the chi-square's 0.4184. Four Monte Carlo errors of the difference.
    df = pd.read_csv(DATA)
    m0 = sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson")
    m1 = sagd.glmm("count ~ x + (1 + x || site)", data=df, family="poisson")
    a = sagd.anova(m0, m1, bootstrap=400, seed=7)
    p, ref = a.p_boot[1], 0.1349
    assert a.p_boot[0] is None and a.boot_refits[1] + len(a.boot_failed[1]) == 400
    err = math.sqrt(p * (1 - p) / a.boot_refits[1] + ref * (1 - ref) / 377)
    assert abs(p - ref) < 4 * err, (p, ref, err)
    assert p < a.p_value[1]
    assert "Pr(boot)" in repr(a)


def test_bootstrap_statistics_are_the_same_on_any_number_of_threads():
    from sagd._anova import _bootstrap_test

    df = pd.read_csv(DATA)
    m0 = sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson")
    m1 = sagd.glmm("count ~ x + dose + (1 | site)", data=df, family="poisson")
    one, _ = _bootstrap_test(m0, m1, 24, 3, None, 1, False)
    two, _ = _bootstrap_test(m0, m1, 24, 3, None, 2, False)
    assert one.tolist() == two.tolist() and all(v > -1e-6 for v in one)


def test_an_interrupted_bootstrap_test_goes_on_from_its_checkpoint(tmp_path):
    """``checkpoint=`` keeps each test's refits in its folder: calls stopped (as Ctrl-C stops
    them) at every 9th refit go on from there, and the one that finishes gives the p-values of
    an uninterrupted run, bit for bit."""
    df = pd.read_csv(DATA)
    m0 = sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson")
    m1 = sagd.glmm("count ~ x + dose + (1 | site)", data=df, family="poisson")
    whole = sagd.anova(m0, m1, bootstrap=30, seed=4)
    stops = 0
    while True:
        try:
            a = sagd.anova(m0, m1, bootstrap=30, seed=4, checkpoint=tmp_path / "anova",
                           checkpoint_every=4, _interrupt_after=9)
            break
        except KeyboardInterrupt as stop:
            assert "test-1.ckpt" in str(stop), stop
            stops += 1
            assert stops < 10
    assert stops >= 2
    assert (a.p_boot, a.boot_refits) == (whole.p_boot, whole.boot_refits)


def test_a_bootstrap_needs_fits_made_here():
    import dataclasses

    df = pd.read_csv(DATA)
    m0 = sagd.glmm("count ~ x + (1 | site)", data=df, family="poisson")
    m1 = dataclasses.replace(sagd.glmm("count ~ x + dose + (1 | site)", data=df,
                                       family="poisson"), _model=None)
    with pytest.raises(ValueError, match="not made by sagd.glmm here"):
        sagd.anova(m0, m1, bootstrap=10)
    with pytest.raises(ValueError, match="bootstrap: 1; give at least 2"):
        sagd.anova(m0, m1, bootstrap=1)


def test_type3_table_is_lmertest_s_anova():
    """lmerTest 3.1-3's anova(fit) (type III, Satterthwaite; R 4.2.2, lme4 1.1-31) of
    lmer(y ~ A * B + x + (1 | subj)) on glmm_factorial.csv (two factors crossed, unbalanced) by
    REML and ML, and of count ~ x * dose + (1 + x | site) by REML on glmm_counts.csv (the
    references of crates/sagd-cli/tests/glmm_ddf.rs): each term's NumDF, DenDF, F and p;
    Mean Sq is F sigma^2. A term that codes its variable itself has no table, and says why."""
    factorial = pd.read_csv(DATA.parent / "glmm_factorial.csv")
    counts = pd.read_csv(DATA).dropna()
    lmertest = {
        ("y ~ A * B + x + (1 | subj)", True): [
            ("A", 2, 71.0235304579, 15.56794044698, 2.47479997618e-06),
            ("B", 1, 76.2310655460, 24.81294245087, 3.83858902786e-06),
            ("x", 1, 76.4751889377, 11.00455241643, 1.39292029385e-03),
            ("A:B", 2, 74.8968106563, 1.02240202126, 3.64694835559e-01)],
        ("y ~ A * B + x + (1 | subj)", False): [
            ("A", 2, 76.7391129245, 16.86333120995, 8.50188512436e-07),
            ("B", 1, 82.4158553241, 26.86242925237, 1.52688231499e-06),
            ("x", 1, 82.6819732174, 11.92069993819, 8.77561146933e-04),
            ("A:B", 2, 80.9600608738, 1.10712901476, 3.35457658685e-01)],
        ("count ~ x * dose + (1 + x | site)", True): [
            ("x", 1, 20.4826333192, 18.76201, 0.0003090),
            ("dose", 2, 150.2435221639, 6.01838, 0.0030597),
            ("x:dose", 2, 110.5844645650, 1.22128, 0.2987976)],
    }
    for (formula, reml), want in lmertest.items():
        data = factorial if formula.startswith("y") else counts
        r = sagd.glmm(formula, data=data, reml=reml, ddf="satterthwaite")
        assert list(r.anova_type3) == [w[0] for w in want]
        for term, q, ddf, f, p in want:
            ss, ms, q_got, ddf_got, f_got, p_got = r.anova_type3[term]
            assert q_got == q
            # lmerTest printed 7 digits of F and p for the counts' fit.
            assert f_got == pytest.approx(f, rel=1e-5)
            assert ddf_got == pytest.approx(ddf, rel=1e-4)
            assert p_got == pytest.approx(p, rel=1e-4)
            assert ms == pytest.approx(f_got * r.sigma ** 2, rel=1e-12)
            assert ss == pytest.approx(ms * q, rel=1e-12)
        assert "type III analysis of variance" in repr(r)
    coded = sagd.glmm("y ~ C(A) + x + (1 | subj)", data=factorial, ddf="satterthwaite")
    assert coded.anova_type3 is None and coded.satterthwaite is not None
    assert "no type III table" in coded.warning and "C(A)" in coded.warning
    assert sagd.glmm("y ~ A + (1 | subj)", data=factorial).anova_type3 is None


def test_kenward_roger_tests_are_lmertest_s():
    """lmerTest 3.1-3's summary(fit, ddf = "Kenward-Roger") and anova(fit, ddf =
    "Kenward-Roger") (pbkrtest 0.5.2) of the factorial REML fit (the reference of
    crates/sagd-cli/tests/glmm_ddf.rs); ML fits and weights refused by name."""
    factorial = pd.read_csv(DATA.parent / "glmm_factorial.csv")
    formula = "y ~ A * B + x + (1 | subj)"
    r = sagd.glmm(formula, data=factorial, reml=True, ddf="Kenward-Roger")
    t = [[0.1927064340519, 37.4474232152, 1.50135539632e-16],
         [0.2105227462852, 71.4178309180, 1.35861656052e-03],
         [0.2092661122826, 72.4139758119, 8.20197919268e-05],
         [0.2969648810174, 76.2421933987, 1.14661281966e-03],
         [0.0903137931697, 76.6955274129, 1.50790355386e-03],
         [0.3905326124777, 74.8492618773, 2.17194425413e-01],
         [0.4029337781992, 75.0113050745, 9.32994341316e-01]]
    np.testing.assert_allclose(r.kenward_roger, t, rtol=1e-4)
    assert r.satterthwaite is None
    f = {"A": (2, 71.3587182956, 15.5211901463, 2.53175832178e-06),
         "B": (1, 76.4570087133, 24.4444698717, 4.41572594292e-06),
         "x": (1, 76.6955274129, 10.8340694447, 1.50790355386e-03),
         "A:B": (2, 75.1549911349, 1.0100806553, 3.69079329037e-01)}
    assert list(r.anova_type3) == list(f)
    for term, (q, ddf, fv, p) in f.items():
        got = r.anova_type3[term]
        assert got[2] == q
        np.testing.assert_allclose(got[3:], (ddf, fv, p), rtol=1e-4)
    assert "Kenward-Roger's method" in repr(r)
    # Sum Sq is the unscaled F sigma^2 NumDF (pbkrtest's FtestU), as lmerTest's: the correlated
    # slopes' dose test has F scaling 0.9997.
    counts = pd.read_csv(DATA).dropna()
    s = sagd.glmm("count ~ x * dose + (1 + x | site)", data=counts, reml=True,
                  ddf="kenward-roger").anova_type3
    for term, ss, fv in [("x", 32.5309205899, 17.63335437772),
                         ("dose", 21.5907417974, 5.85000687650),
                         ("x:dose", 4.07312300547, 1.10195112458)]:
        assert s[term][0] == pytest.approx(ss, rel=2e-5) and s[term][4] == pytest.approx(fv, rel=1e-4)
    with pytest.raises(ValueError, match="REML fits"):
        sagd.glmm(formula, data=factorial, ddf="kenward-roger")
    with pytest.raises(ValueError, match="weights"):
        sagd.glmm(formula, data=factorial, reml=True, ddf="kenward-roger",
                  weights=np.ones(len(factorial)))


def test_kenward_roger_on_a_large_crossed_block_is_lmertest_s():
    """A crossed design is one block of every row: 5000 rows, 100 x 50 levels, whose dense
    5000 x 5000 matrices pbkrtest takes (lmerTest 3.1-3's summary and anova with ddf =
    "Kenward-Roger": 627 s in R 4.2.2 with pbkrtest 0.5.2); here through Woodbury's identity in
    the block's 150 effects. The references: R on this data written to CSV, REML."""
    rng = np.random.default_rng(2)
    g, h = np.repeat(np.arange(100), 50), np.tile(np.arange(50), 100)
    x = rng.normal(size=5000)
    y = x + rng.normal(0, 0.7, 100)[g] + rng.normal(0, 0.4, 50)[h] + rng.normal(0, 0.5, 5000)
    df = pd.DataFrame(dict(y=y, x=x, g=g, h=h))
    r = sagd.glmm("y ~ x + (1 | g) + (1 | h)", data=df, reml=True, ddf="kenward-roger")
    assert r.warning is None
    np.testing.assert_allclose(np.asarray(r.kenward_roger)[0],
                               [0.0849201558165, 119.320052796, 0.372067966143], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(r.kenward_roger)[1, :2],
                               [0.0072964391913, 4854.779303360], rtol=1e-6)
    ss, _, q, ddf, fv, _ = r.anova_type3["x"]
    assert q == 1
    np.testing.assert_allclose([ss, ddf, fv], [4849.207156, 4854.779303, 18763.85073], rtol=1e-6)


def test_type1_and_type2_tables_are_lmertest_s():
    """lmerTest 3.1-3's anova(fit, type = 1) and anova(fit, type = 2) (pbkrtest 0.5.2 for
    Kenward-Roger; the references of crates/sagd-cli/tests/glmm_ddf.rs): per term Sum Sq,
    NumDF, DenDF, F and p. In y ~ x * A + B, x is contained in x:A and A is not (their numeric
    variables differ), so type II tests A whole, as lmerTest does."""
    factorial = pd.read_csv(DATA.parent / "glmm_factorial.csv")
    counts = pd.read_csv(DATA).dropna()
    cases = [
        ("y ~ A * B + x + (1 | subj)", True, "satterthwaite", 1, factorial,
         {"A": (13.5737692208, 2, 69.9526742755, 15.4171123451, 2.83635963401e-06),
          "B": (7.69635380695, 1, 75.7779814926, 17.4830659575, 7.70451424554e-05)}),
        ("y ~ A * B + x + (1 | subj)", True, "kenward-roger", "II", factorial,
         {"A": (15.1489189293, 2, 70.5880857972, 17.2061695132, 8.1884493775e-07),
          "x": (4.76934834075, 1, 76.6955274129, 10.8340694447, 0.00150790355386)}),
        ("y ~ x * A + B + (1 | subj)", False, "satterthwaite", 2, factorial,
         {"x": (4.67938640106, 1, 83.3282262307, 11.2292344787, 0.00121195439986),
          "A": (14.2461590076, 2, 76.2683419536, 17.093422749, 7.35242906512e-07),
          "x:A": (0.0978546407808, 2, 80.7704349055, 0.117412050639, 0.889370202367)}),
        ("count ~ x * dose + (1 + x | site)", True, "satterthwaite", 2, counts,
         {"dose": (22.2060513268, 2, 150.243522164, 6.0183849526, 0.00305965754292),
          "x:dose": (4.50616396881, 2, 110.584464565, 1.22128103843, 0.298797635769)}),
    ]
    for formula, reml, ddf, kind, data, want in cases:
        r = sagd.glmm(formula, data=data, reml=reml, ddf=ddf, anova_type=kind)
        table = r.anova_type1 if kind == 1 else r.anova_type2
        assert r.anova_type3 is None and table is not None
        for term, (ss, q, den, f, p) in want.items():
            got = table[term]
            assert got[2] == q
            np.testing.assert_allclose([got[0], got[3], got[4], got[5]], [ss, den, f, p],
                                       rtol=1e-4, err_msg=f"{formula} {kind} {term}")
        name = "type I " if kind == 1 else "type II "
        assert name + "analysis of variance" in repr(r)
    with pytest.raises(ValueError, match="anova_type"):
        sagd.glmm("y ~ A + (1 | subj)", data=factorial, ddf="satterthwaite", anova_type=4)
    with pytest.raises(ValueError, match="come with ddf"):
        sagd.glmm("y ~ A + (1 | subj)", data=factorial, anova_type=2)
