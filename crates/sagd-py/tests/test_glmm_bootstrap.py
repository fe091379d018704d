"""`sagd.glmm(..., bootstrap=N)`: the parametric bootstrap against lme4 1.1-31's
``confint(fit, method = "boot", nsim = 2000, boot.type = "perc")`` (the reference of
``crates/sagd-cli/tests/glmm_bootstrap.rs``), the same refits as the command line's and on any
number of threads, and bad settings refused by name."""

from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("formulaic")

import sagd  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "sagd-cli" / "tests" / "data"

# lme4's percentile intervals of glmer(count ~ x + dose + (1 | site), poisson, nAGQ = 25) on
# glmm_counts.csv, set.seed(1), 2000 refits.
LME4 = {"(Intercept)": (0.2386660, 0.8179219), "x": (0.2035062, 0.4359659),
        "dose[T.high]": (-0.9901234, -0.3382764), "dose[T.low]": (-0.3288983, 0.2032192),
        "sd (Intercept)": (0.3717054, 0.8174153)}


@pytest.fixture(scope="module")
def counts():
    return pd.read_csv(DATA / "glmm_counts.csv")


def test_percentile_intervals_agree_with_lme4s(counts):
    r = sagd.glmm("count ~ x + dose + (1 | site)", data=counts, family="poisson",
                  bootstrap=2000, seed=3)
    assert r.bootstrap.shape == (2000, 5) and r.bootstrap_failed == {}
    assert r.bootstrap_names == list(LME4)
    assert r.confint_boot_level == 0.95
    for j, (name, want) in enumerate(LME4.items()):
        # The error of a 2.5 % quantile of 2000 draws, sqrt(p (1 - p) / N) / phi(1.96) of the
        # refits' sd, for each tool: four errors of the difference.
        err = np.sqrt(0.025 * 0.975 / 2000) / 0.05845 * r.bootstrap[:, j].std(ddof=1)
        got = r.confint_boot[name]
        assert np.all(np.abs(np.subtract(got, want)) < 4 * np.sqrt(2) * err), (name, got, want)
    assert "parametric bootstrap intervals (95%, percentiles of 2000 refits)" in str(r)


def test_refits_are_the_same_on_any_number_of_threads(counts):
    runs = [sagd.glmm("count ~ x + (1 | site)", data=counts, family="poisson", bootstrap=40,
                      seed=5, threads=t).bootstrap for t in (1, 2)]
    np.testing.assert_array_equal(runs[0], runs[1])


def test_reml_fits_with_correlated_effects_are_bootstrapped(counts):
    r = sagd.glmm("count ~ x + (1 + x | site)", data=counts, reml=True, bootstrap=60,
                  bootstrap_level=0.9, seed=1)
    assert r.bootstrap_names == ["(Intercept)", "x", "sd (Intercept)", "sd x",
                                 "cor (Intercept):x", "sigma"]
    ok = r.bootstrap[~np.isnan(r.bootstrap).any(axis=1)]
    lo, hi = r.confint_boot["sigma"]
    assert lo < r.sigma < hi
    assert (lo, hi) == (np.quantile(ok[:, 5], 0.05), np.quantile(ok[:, 5], 0.95))
    assert np.all(np.abs(ok[:, 4]) <= 1)


def test_bad_bootstrap_settings_are_refused(counts):
    with pytest.raises(ValueError, match="bootstrap: 1; give at least 2"):
        sagd.glmm("count ~ x + (1 | site)", data=counts, bootstrap=1)
    with pytest.raises(ValueError, match="bootstrap_level: 1.5"):
        sagd.glmm("count ~ x + (1 | site)", data=counts, bootstrap=20, bootstrap_level=1.5)


def test_an_interrupted_bootstrap_goes_on_from_its_checkpoint(counts, tmp_path):
    """A bootstrap with ``checkpoint=`` stopped (as Ctrl-C stops it) after some refits keeps
    them; the same call goes on from there, stopped again and again, and ends with the
    replicates of an uninterrupted run, bit for bit; another seed's call is refused by name, and
    a checkpoint without a bootstrap."""
    args = dict(data=counts, family="poisson", bootstrap=40, seed=5)
    whole = sagd.glmm("count ~ x + dose + (1 | site)", **args)
    path = tmp_path / "boot.ckpt"
    # Every call stops at its 9th refit (those under way finish: at most a part more), so the
    # 40 take several calls, and the one that finishes has gone on from the checkpoint.
    stops = 0
    while True:
        try:
            resumed = sagd.glmm("count ~ x + dose + (1 | site)", **args, checkpoint=path,
                                checkpoint_every=4, _interrupt_after=9)
            break
        except KeyboardInterrupt as stop:
            assert "kept in" in str(stop) and path.exists(), stop
            stops += 1
            assert stops < 10
    assert stops >= 3
    np.testing.assert_array_equal(resumed.bootstrap, whole.bootstrap)
    assert resumed.confint_boot == whole.confint_boot
    with pytest.raises(ValueError, match="differs in seed"):
        sagd.glmm("count ~ x + dose + (1 | site)", **{**args, "seed": 6}, checkpoint=path)
    with pytest.raises(ValueError, match="give bootstrap=N"):
        sagd.glmm("count ~ x + dose + (1 | site)", data=counts, checkpoint=path)
