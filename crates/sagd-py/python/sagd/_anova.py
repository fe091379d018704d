"""Likelihood-ratio tests of nested mixed models, as lme4's ``anova(m0, m1, ...)``."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from . import _core
from ._common import _progress, _say_kept, _threads, _whole
from ._glmm import GlmmResult


@dataclass
class AnovaResult:
    """Nested fits ordered by their parameters, each against the one before it.

    Attributes:
        names: each model's label (its formula where it has one, else ``"model k"``, k its place
            among the arguments).
        n_params: the parameters each model estimates (lme4's ``npar``).
        aic, bic, loglik, deviance: each model's, as its result gives them (-2 loglik for the
            deviance); ``loglik_se`` their Monte Carlo errors (0 where exact).
        chisq: twice the gain in log-likelihood over the model before (None for the first);
            ``chisq_se`` its Monte Carlo error where a log-likelihood was sampled.
        df: the parameters gained; p_value: the chi-square test's upper tail at ``chisq`` on
            ``df`` degrees of freedom (None for the first, or where ``df`` is 0).
        p_boot: with ``bootstrap=N``, the parametric bootstrap's p-value of each comparison
            (pbkrtest's ``PBmodcomp``): (1 + the refits' statistics at or above Chisq) / (1 +
            the refits), each of N responses drawn from the model before and fitted by both;
            ``boot_refits`` the refits that succeeded, ``boot_failed`` per comparison the draws
            whose refit failed and why.
        warning: what the reader must know (sampled log-likelihoods; variances tested at 0,
            where the chi-square test is conservative and the bootstrap's is not).
        refitted_by_ml: whether REML fits were refitted by maximum likelihood to be compared.
    """

    names: List[str] = field(default_factory=list)
    n_params: List[int] = field(default_factory=list)
    aic: List[float] = field(default_factory=list)
    bic: List[float] = field(default_factory=list)
    loglik: List[float] = field(default_factory=list)
    loglik_se: List[float] = field(default_factory=list)
    deviance: List[float] = field(default_factory=list)
    chisq: List[Optional[float]] = field(default_factory=list)
    chisq_se: List[Optional[float]] = field(default_factory=list)
    df: List[Optional[int]] = field(default_factory=list)
    p_value: List[Optional[float]] = field(default_factory=list)
    p_boot: List[Optional[float]] = field(default_factory=list)
    boot_refits: List[Optional[int]] = field(default_factory=list)
    boot_failed: List[Dict[int, str]] = field(default_factory=list)
    warning: Optional[str] = None
    refitted_by_ml: bool = False

    def __repr__(self) -> str:
        width = max(len(n) for n in self.names)
        head = (f"{'':<{width}} {'npar':>5} {'AIC':>10} {'BIC':>10} {'logLik':>11} "
                f"{'deviance':>10} {'Chisq':>9} {'Df':>3} {'Pr(>Chisq)':>11}")
        booted = any(p is not None for p in self.p_boot)
        if booted:
            head += f" {'Pr(boot)':>9}"
        rows = ["(the models refitted by ML instead of REML)", head][not self.refitted_by_ml:]
        for k, name in enumerate(self.names):
            row = (f"{name:<{width}} {self.n_params[k]:>5} {self.aic[k]:>10.2f} "
                   f"{self.bic[k]:>10.2f} {self.loglik[k]:>11.4f} {self.deviance[k]:>10.4f}")
            if self.chisq[k] is not None:
                p = self.p_value[k]
                row += (f" {self.chisq[k]:>9.4f} {self.df[k]:>3} "
                        f"{'' if p is None else format(p, '.4g'):>11}")
                if booted:
                    pb = self.p_boot[k]
                    row += f" {'' if pb is None else format(pb, '.4g'):>9}"
            rows.append(row)
        if self.warning:
            rows.append(f"warning: {self.warning}")
        return "\n".join(rows)

    def to_pandas(self):
        """The table as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame({"npar": self.n_params, "AIC": self.aic, "BIC": self.bic,
                             "logLik": self.loglik, "deviance": self.deviance,
                             "Chisq": self.chisq, "Df": self.df, "Pr(>Chisq)": self.p_value,
                             "Pr(boot)": self.p_boot},
                            index=self.names)


def chi2_upper_tail(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square on a whole number ``df`` of degrees of freedom, in closed
    form: e^(-x/2) times a finite sum for even df, with erfc(sqrt(x/2)) for odd df."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df: {df}: the degrees of freedom of a comparison are a whole number >= 1")
    if not x > 0:
        return 1.0
    h = 0.5 * x
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= h / k
            total += term
        return min(1.0, math.exp(-h) * total)
    total = math.erfc(math.sqrt(h))
    # The terms h^(k + 1/2) / Gamma(k + 3/2), k = 0 .. (df - 3) / 2, each from the one before.
    term = math.sqrt(h) / math.gamma(1.5)
    for k in range((df - 1) // 2):
        if k > 0:
            term *= h / (k + 0.5)
        total += math.exp(-h) * term
    return min(1.0, total)


def anova(*models: GlmmResult, bootstrap: Optional[int] = None, seed: int = 0,
          threads: Optional[int] = None, progress: bool = False, checkpoint: Any = None,
          checkpoint_every: int = 100, _interrupt_after: Optional[int] = None) -> AnovaResult:
    """Likelihood-ratio tests of nested GLMMs fitted to the same data, as lme4's
    ``anova(m0, m1, ...)``: the models ordered by their parameters, each tested against the
    one before by twice its gain in log-likelihood on the chi-square law with the parameters
    gained as its degrees of freedom. The models must be nested, which is not checked (nor is
    it by lme4). A variance tested at 0 sits on its boundary, where the test is conservative
    (its p-value about twice the true one); the result's ``warning`` says so, and
    ``bootstrap=N`` gives each comparison the parametric bootstrap's p-value too (pbkrtest's
    ``PBmodcomp``), which holds there.

    Args:
        models: two or more :class:`GlmmResult` fitted to the same observations and family;
            those fitted by REML (``reml=True``) are refitted by maximum likelihood first, as
            lme4's ``anova`` refits them, and the result's ``refitted_by_ml`` says so.
        bootstrap: a number of draws for the parametric bootstrap's test of each model against
            the one before it: responses drawn from the smaller model at its estimate, each
            fitted by both (under the smaller fit's method, nodes and M-steps); in ``p_boot``.
        seed: the bootstrap's draws; the same on any number of ``threads``.
        threads: worker threads of the bootstrap's refits (default: all cores).
        progress: a progress bar of the refits.
        checkpoint: with ``bootstrap``, a folder (made if missing) that keeps each test's
            refits (``test-1.ckpt``, ...), written after every ``checkpoint_every`` of them
            (default 100): Ctrl-C keeps those done, and the same call goes on from there to the
            p-values of an uninterrupted run (a file of other fits or another seed is refused
            by name).

    Returns:
        An :class:`AnovaResult`.

    Raises:
        ValueError: fewer than two models, a REML fit not made here (so not refitted), or fits of
            other data or families.
    """
    if len(models) < 2:
        raise ValueError(f"anova: {len(models)} model(s): give two or more nested fits")
    for k, m in enumerate(models, 1):
        if not isinstance(m, GlmmResult):
            raise ValueError(f"anova: argument {k} is a {type(m).__name__}, not a sagd.glmm fit")
        if m.loglik is None:
            raise ValueError(f"anova: model {k} has no log-likelihood; refit it")
    refitted = any(m.reml for m in models)
    models = tuple(_by_ml(m, k) if m.reml else m for k, m in enumerate(models, 1))
    first = models[0]
    for k, m in enumerate(models[1:], 2):
        if (m.n_obs, m.family) != (first.n_obs, first.family):
            raise ValueError(f"anova: model {k} is a {m.family} fit of {m.n_obs} observations, "
                             f"model 1 a {first.family} fit of {first.n_obs}: compare fits of "
                             "the same data and family")
    order = sorted(range(len(models)), key=lambda k: len(models[k].estimate))
    out = AnovaResult(refitted_by_ml=refitted)
    sampled = False
    for place, k in enumerate(order):
        m = models[k]
        out.names.append(m.formula or f"model {k + 1}")
        out.n_params.append(len(m.estimate))
        out.aic.append(float(m.aic))
        out.bic.append(float(m.bic))
        out.loglik.append(float(m.loglik))
        se = float(m.loglik_se or 0.0) if m.method != "exact" else 0.0
        sampled = sampled or se > 0
        out.loglik_se.append(se)
        out.deviance.append(-2.0 * float(m.loglik))
        if place == 0:
            for column in (out.chisq, out.chisq_se, out.df, out.p_value):
                column.append(None)
            continue
        chisq = 2.0 * (out.loglik[-1] - out.loglik[-2])
        df = out.n_params[-1] - out.n_params[-2]
        out.chisq.append(chisq)
        out.chisq_se.append(2.0 * math.hypot(out.loglik_se[-1], out.loglik_se[-2]) or None)
        out.df.append(df)
        out.p_value.append(chi2_upper_tail(chisq, df) if df > 0 else None)
    notes = []
    if sampled:
        notes.append("some log-likelihoods are sampled (fits by EM): each Chisq has the Monte "
                     "Carlo error in chisq_se")
    if len({len(m.random_sd) for m in models}) > 1:
        notes.append("the models differ in their random effects: a variance tested at 0 lies on "
                     "its boundary, where the chi-square test is conservative")
    out.warning = "; ".join(notes) or None
    for column in (out.p_boot, out.boot_refits):
        column.extend([None] * len(order))
    out.boot_failed = [{} for _ in order]
    if bootstrap is not None:
        draws = _whole("bootstrap", bootstrap, 2)
        for place in range(1, len(order)):
            null, alt = models[order[place - 1]], models[order[place]]
            kept = None
            if checkpoint is not None:
                os.makedirs(checkpoint, exist_ok=True)
                kept = (os.path.join(os.fspath(checkpoint), f"test-{place}.ckpt"),
                        _whole("checkpoint_every", checkpoint_every, 1), _interrupt_after)
            stats, failed = _bootstrap_test(null, alt, draws, _whole("seed", seed), kept,
                                            threads, progress)
            ok = stats[~np.isnan(stats)]
            # Ties within rounding count as at or above (a null on its boundary gives 0 often).
            at_least = int(np.sum(ok >= out.chisq[place] - 1e-6))
            out.p_boot[place] = (1 + at_least) / (1 + len(ok)) if len(ok) else None
            out.boot_refits[place] = len(ok)
            out.boot_failed[place] = failed
    return out


def _by_ml(m: GlmmResult, k: int) -> GlmmResult:
    """The REML fit ``m`` (argument ``k``) refitted by maximum likelihood from its model's
    arrays: its estimate, log-likelihood, AIC and BIC, the rest kept."""
    if m._model is None or "terms" not in m._model:
        raise ValueError(f"anova: model {k} was fitted by REML and not by sagd.glmm here, so it "
                         "cannot be refitted by ML, which the comparison needs; refit it with "
                         "reml=False")
    s = m._model
    d = _core.fit_glmm(**s["core"], x_names=s["x_names"], terms=s["terms"], method=s["method"],
                       reml=False, nodes=s["nodes"], max_msteps=s["max_msteps"], ranef_draws=0)
    return dataclasses.replace(m, estimate=np.asarray(d["estimate"], dtype=float), reml=False,
                               loglik=d.get("loglik"), aic=d.get("aic"), bic=d.get("bic"),
                               method=str(d.get("method", m.method)))


def _bootstrap_test(null: GlmmResult, alt: GlmmResult, draws: int, seed: int, kept: Any,
                    threads: Optional[int], progress: bool) -> Any:
    """The core's bootstrap statistics of ``null`` against ``alt`` (NaN where a refit failed)
    and the failed draws; kept, where ``kept`` gives them, in its file after every so many
    refits (and stopped after so many, for the tests)."""
    for k, m in ((1, null), (2, alt)):
        if m._model is None:
            raise ValueError(f"anova: bootstrap: the {'smaller' if k == 1 else 'larger'} model "
                             "was not made by sagd.glmm here, so its data cannot be redrawn; "
                             "fit it again with sagd.glmm")
    show, close = _progress(progress, draws, "sagd.anova bootstrap")
    settings = null._model
    try:
        stats, failed = _core.bootstrap_lrt(
            null=settings["core"], alt=alt._model["core"],
            theta_null=[float(v) for v in null.estimate],
            theta_alt=[float(v) for v in alt.estimate], draws=draws, seed=seed,
            threads=_threads(threads), progress=show, method=settings["method"],
            nodes=settings["nodes"], max_msteps=settings["max_msteps"],
            **({} if kept is None else dict(checkpoint=kept[0], checkpoint_every=kept[1],
                                            interrupt_after=kept[2])))
    except KeyboardInterrupt as stop:
        _say_kept(stop, None if kept is None else kept[0])
    finally:
        close()
    return np.asarray(stats, dtype=float), {int(d): str(why) for d, why in failed}
