"""`sagd.glmm`'s result: the fit on lme4's scales, its summary, and its model kept for
`predict`, `simulate` and `sagd.anova`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _core
from ._common import FitResult, _table, _threads, _whole
from ._ls_means import LsMeansResult


@dataclass
class GlmmResult(FitResult):
    """A fitted GLMM. Besides :class:`FitResult`'s fields (on the internal scale theta = (beta;
    per grouping factor, log of the diagonal of the Cholesky factor L of its effects' covariance,
    then, when correlated, L's lower off-diagonal row by row; log sigma)):

    Attributes:
        family: ``"gaussian"``, ``"poisson"`` or ``"binomial"``.
        fixed: the fixed effects beta; ``fixed_se`` their standard errors.
        random_sd: the random effects' standard deviations, grouping factor by grouping factor
            (one per column of its Z); ``random_sd_se`` theirs (delta method); ``random_names``
            "factor: column" for each.
        random_cor: per grouping factor, the correlation matrix of its effects (the identity
            when they are independent).
        sigma: the residual sd (Gaussian family), ``sigma_se`` its standard error.
        loglik: the log-likelihood at the estimate, every constant included as lme4's: exact
            (quadrature with one random effect per point; closed form for the Gaussian family)
            or by importance sampling, with ``loglik_se`` its Monte Carlo error (for an exact
            fit by quadrature, the quadrature's error; 0 for the closed form) and
            ``loglik_method`` saying which.
        method: ``"exact"`` (the likelihood maximised directly, as lme4) or ``"em"`` (automated
            Monte Carlo EM with Langevin chains).
        reml: whether the Gaussian fit maximised the REML criterion; ``reml_loglik`` its value
            (lme4's ``logLik`` of a REML fit).
        aic, bic: -2 x the maximised criterion + 2k (AIC) or k log n (BIC), k the parameters in
            theta: lme4's ``AIC`` and ``BIC`` (of the REML criterion after a REML fit).
        iterations: the maximiser's iterations (exact fits).
        formula: the formula fitted, if one was given; ``n_obs`` the observations used.
        groups: the group labels (one grouping factor), or a dict factor -> labels.
        ranef: per grouping factor, each level's random effects given the data (lme4's
            ``ranef``): an array of one row per level, in the order of ``groups``' labels, and one
            column per effect, at the conditional mode; ``ranef_sd`` their conditional sds
            (lme4's ``condVar``; exact for the Gaussian family, else from the curvature at the
            mode). An array for one grouping factor, a dict factor -> array for several; None
            (and why, in ``warning``) where a level's mode could not be found.
        ranef_mean: the same effects' exact conditional means E[b | y] at the estimate, and
            ``ranef_mean_sd`` their conditional sds, in ``ranef``'s layout: the posterior's
            moments by adaptive Gauss-Hermite quadrature (100, 30 or 16 nodes a dimension for 1,
            2 or 3 effects per block), where lme4 gives its mode and Laplace's curvature. Equal to
            ``ranef`` for the Gaussian family. Blocks of more than 3 effects (crossed factors,
            which join their levels in one block) are sampled instead: Hamiltonian Monte Carlo
            on each block's posterior, 4 chains of ``ranef_draws`` draws preconditioned by
            Laplace's curvature at the mode, exact up to Monte Carlo error; ``ranef_mean_mcse``
            holds each mean's Monte Carlo error (0 where integrated), and ``warning`` says so
            where the chains have not mixed (R-hat above 1.01). None with ``ranef_draws=0``.
        eta, fitted: each observation's linear predictor (offset included) and mean (the
            probability of a success for the binomial family) with every level's effects at
            their conditional modes: lme4's ``predict(fit)`` and ``fitted(fit)``. One value per
            observation used, in the data's order; ``rows`` says which rows of ``data`` they are
            (lme4's ``na.omit`` drops the others). None (and why, in ``warning``) where a level's
            mode could not be found.
        resid_response, resid_pearson, resid_deviance: each observation's residuals, as lme4's
            ``residuals(fit, type)``: y - fitted (binomial: the proportion of successes less
            the probability); over the response's sd under the family (sigma, sqrt(mu),
            sqrt(p (1 - p) / trials): ``type = "pearson", scaled = TRUE``); sign(y - mu) times
            the root of the observation's share of the deviance (glmer's default).
        resid_quantiles: the Pearson residuals' minimum, quartiles and maximum, which lme4's
            ``summary`` prints as its scaled residuals.
        rows: with a formula, the positions in ``data`` of the observations used; None with
            arrays (every row, in order).
        confint: with ``profile=level``, the profile-likelihood confidence intervals (lme4's
            ``confint(fit)``) of the fixed effects, every random effect's sd, each correlation
            with a factor's first effect (``"cor (Intercept):x"``; between later effects of 3 or
            more, none) and sigma: a dict name -> (lower, upper) on the summary's scales, an
            sd's lower end 0 and a correlation's end ±1 where the profile never falls far
            enough; ``confint_level`` the level.
            None (and why, in ``warning``) for a fit by EM.
        simulations: with ``simulate=N``, N draws of new responses from the fitted model, an
            array of N rows of one value per observation used (lme4's ``simulate(fit, N)``,
            transposed).
        satterthwaite: with ``ddf="satterthwaite"``, one row per fixed effect: its standard
            error given the variance parameters (lmer's ``vcov``), Satterthwaite's degrees of
            freedom and the t test's two-sided p-value (lmerTest's Std. Error, df, Pr(>|t|)).
        kenward_roger: with ``ddf="kenward-roger"``, as ``satterthwaite`` by Kenward and
            Roger's method: each fixed effect's standard error from beta's adjusted covariance
            (pbkrtest's ``vcovAdj``), the degrees of freedom and p.
        anova_type3: with ``ddf`` and a formula, lmerTest's type III table
            (``anova(fit)``): per term of the fixed effects but the intercept, in the formula's
            order, (Sum Sq, Mean Sq, NumDF, DenDF, F value, Pr(>F)), the hypothesis that the
            term's coefficients are 0 with every categorical variable under sum-to-zero
            contrasts, the denominator degrees of freedom by the ``ddf`` method.
        anova_type2, anova_type1: with ``ddf`` and ``anova_type=2`` (or 1), lmerTest's type II
            (type I) table, in the same form: each term adjusted for every term that does not
            contain it (sequentially, in the formula's order).
        ls_means: with ``ls_means`` and a formula, lmerTest's least-squares means (a
            :class:`LsMeansResult`; ``print`` it for the table).
        bootstrap: with ``bootstrap=N``, the parametric bootstrap's N refits (lme4's
            ``bootMer``): an array of N rows, each refit's estimates on the summary's scales in
            the order of ``bootstrap_names`` (the fixed effects, each factor's ``sd ...`` and
            ``cor ...`` as ``confint`` names them, ``sigma``); a row of NaN where the refit
            failed, and why in ``bootstrap_failed`` (draw -> reason).
        confint_boot: the bootstrap's percentile intervals at ``confint_boot_level`` (lme4's
            ``confint(fit, method = "boot")``): a dict name -> (lower, upper), the quantiles of
            the refits that succeeded (numpy's and R's default interpolation).
        n_points: the independent blocks of the data EM works on: the groups of one factor, the
            top-level groups of nested ones, often the whole data set for crossed ones.
    """

    family: str = ""
    fixed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    fixed_se: np.ndarray = field(default_factory=lambda: np.zeros(0))
    random_sd: np.ndarray = field(default_factory=lambda: np.zeros(0))
    random_sd_se: np.ndarray = field(default_factory=lambda: np.zeros(0))
    random_names: List[str] = field(default_factory=list)
    random_cor: List[np.ndarray] = field(default_factory=list)
    sigma: Optional[float] = None
    sigma_se: Optional[float] = None
    loglik: Optional[float] = None
    loglik_se: Optional[float] = None
    loglik_method: Optional[str] = None
    groups: Any = None
    n_points: int = 0
    method: str = "em"
    formula: Optional[str] = None
    n_obs: int = 0
    reml: bool = False
    reml_loglik: Optional[float] = None
    aic: Optional[float] = None
    bic: Optional[float] = None
    iterations: int = 0
    ranef: Any = None
    ranef_sd: Any = None
    ranef_mean: Any = None
    ranef_mean_sd: Any = None
    ranef_mean_mcse: Any = None
    eta: Optional[np.ndarray] = None
    fitted: Optional[np.ndarray] = None
    resid_response: Optional[np.ndarray] = None
    resid_pearson: Optional[np.ndarray] = None
    resid_deviance: Optional[np.ndarray] = None
    resid_quantiles: Optional[np.ndarray] = None
    rows: Optional[np.ndarray] = None
    confint: Optional[Dict[str, Tuple[float, float]]] = None
    confint_level: Optional[float] = None
    simulations: Optional[np.ndarray] = None
    satterthwaite: Optional[np.ndarray] = None
    kenward_roger: Optional[np.ndarray] = None
    anova_type3: Optional[Dict[str, Tuple[float, float, int, float, float, float]]] = None
    anova_type2: Optional[Dict[str, Tuple[float, float, int, float, float, float]]] = None
    anova_type1: Optional[Dict[str, Tuple[float, float, int, float, float, float]]] = None
    ls_means: Optional[LsMeansResult] = None
    bootstrap: Optional[np.ndarray] = None
    bootstrap_names: List[str] = field(default_factory=list)
    bootstrap_failed: Dict[int, str] = field(default_factory=dict)
    confint_boot: Optional[Dict[str, Tuple[float, float]]] = None
    confint_boot_level: Optional[float] = None
    # With a formula: how its matrices were built, for `predict` on new rows.
    _spec: Any = field(default=None, repr=False, compare=False)
    # The model's arrays and the fit's settings, for `sagd.anova`'s bootstrap refits.
    _model: Any = field(default=None, repr=False, compare=False)

    def predict(self, newdata: Any = None, *, X: Any = None, groups: Any = None, Z: Any = None,
                offset: Any = None, conditional: bool = True,
                type: str = "link") -> np.ndarray:
        """The fit on new rows, lme4's ``predict(fit, newdata, allow.new.levels = TRUE)``.

        Args:
            newdata: for a formula fit, the new rows (a DataFrame with the formula's
                predictors, grouping factors and offsets; the response may be left out); a
                categorical value the fitted data lack is refused. None with no other
                argument: the fit's own ``eta`` (or ``fitted``).
            X, groups, Z, offset: for a fit made from arrays, the new rows as ``sagd.glmm``
                took them (X's columns, each factor's labels, Z where a factor has several
                effects, the offset).
            conditional: each level the fit has seen at its conditional mode (lme4's
                ``re.form = NULL``, the default); False: no level's effect (``re.form = NA``).
                A level the fit has not seen has no effect either way (the population's value).
            type: ``"link"`` (eta, the default, as lme4's) or ``"response"`` (the mean: a
                probability for the binomial family).

        Returns:
            One value per new row; NaN for a row missing a value the formula reads.
        """
        from ._predict import predict

        return predict(self, newdata, X=X, groups=groups, Z=Z, offset=offset,
                       conditional=conditional, type=type)

    def simulate(self, nsim: int = 1, *, seed: int = 0, conditional: bool = False,
                 threads: Optional[int] = None) -> np.ndarray:
        """New responses drawn from the fitted model, lme4's ``simulate(fit, nsim, seed)``:
        the draws a parametric bootstrap or a check of the model against its data is made of.

        Args:
            nsim: the number of response vectors.
            seed: their randomness; draw d the same on any number of ``threads`` and the same
                as ``sagd.glmm(..., simulate=N, seed=seed)``'s draw d.
            conditional: hold each level's effects at their conditional modes (lme4's
                ``use.u = TRUE``, the variation left that of the responses given them); False
                (lme4's default): every level's effects drawn afresh from their fitted law.
            threads: worker threads (default: all cores).

        Returns:
            An array of ``nsim`` rows of one value per observation used (lme4's result,
            transposed).

        Raises:
            ValueError: ``nsim`` not a whole number of at least 1, or a fit that was not made
                by ``sagd.glmm`` here.
        """
        if self._model is None:
            raise ValueError("simulate: this fit was not made by sagd.glmm here, so its model "
                             "cannot be drawn from; fit it again with sagd.glmm")
        sims = _core.simulate_glmm(model=self._model["core"],
                                   theta=[float(v) for v in self.estimate],
                                   draws=_whole("nsim", nsim, 1), seed=_whole("seed", seed),
                                   conditional=bool(conditional), threads=_threads(threads))
        return np.asarray(sims, dtype=float).reshape(len(sims), -1)

    def __repr__(self) -> str:
        p = len(self.fixed)
        n_groups = (len(self.groups) if not isinstance(self.groups, dict) else
                    " x ".join(str(len(v)) for v in self.groups.values()))
        rows = self._rows()
        if self.method == "exact":
            how = (f"{'REML' if self.reml else 'maximum likelihood'}, exact "
                   f"({'closed form' if self.loglik_method == 'exact' else self.loglik_method}), "
                   f"{self.iterations} iterations")
            # No Monte Carlo error to show.
            rows = [(n, e, math.nan, s, math.nan) for n, e, _, s, _ in rows]
        else:
            how = (f"{self.status}, {self.msteps} M-steps" if self.msteps
                   else f"{self.status} from Laplace's maximum, no M-step")
        head = f"GLMM ({self.family}), {n_groups} groups: {how}"
        if self.formula:
            head = f"{self.formula}  [{self.family}, {self.n_obs} observations]\n{head}"
        fixed = _table(rows[:p], head)
        sds = [(f"sd {n}", float(t), math.nan, float(s), math.nan)
               for n, t, s in zip(self.random_names, self.random_sd, self.random_sd_se)]
        if self.sigma is not None:
            sds.append(("sigma", self.sigma, math.nan, float(self.sigma_se), math.nan))
        out = fixed + "\n" + _table(sds, "random effects and residual (sd scale)")
        for name, cor in zip(self._factor_names(), self.random_cor):
            if cor.shape[0] > 1 and np.any(cor != np.eye(cor.shape[0])):
                rows = "\n".join("  " + " ".join(f"{v:7.3f}" for v in r) for r in cor)
                out += f"\ncorrelations of {name}'s effects:\n{rows}"
        if self.loglik is not None:
            sampled = bool(self.loglik_se) and self.method != "exact"
            out += f"\n{'' if sampled else 'exact '}log-likelihood {self.loglik:.4f}"
            if sampled:
                out += f" ± {self.loglik_se:.4f} ({self.loglik_method})"
            elif self.loglik_se:
                out += f" (quadrature error {self.loglik_se:.1g})"
        if self.reml_loglik is not None:
            out += f"\nREML criterion {self.reml_loglik:.4f}"
        if self.aic is not None:
            out += f"\nAIC {self.aic:.2f}  BIC {self.bic:.2f}"
        if self.confint:
            pct = f"{100 * self.confint_level:g}%"
            out += f"\nprofile confidence intervals ({pct}, exact likelihood):"
            out += "".join(f"\n  {n:<28} {lo:10.5f} {hi:10.5f}"
                           for n, (lo, hi) in self.confint.items())
        if self.confint_boot:
            pct = f"{100 * self.confint_boot_level:g}%"
            refits = len(self.bootstrap) - len(self.bootstrap_failed)
            out += f"\nparametric bootstrap intervals ({pct}, percentiles of {refits} refits):"
            out += "".join(f"\n  {n:<28} {lo:10.5f} {hi:10.5f}"
                           for n, (lo, hi) in self.confint_boot.items())
        for name, table in (("III", self.anova_type3), ("II", self.anova_type2),
                            ("I", self.anova_type1)):
            if not table:
                continue
            how = "Kenward-Roger's" if self.kenward_roger is not None else "Satterthwaite's"
            out += (f"\ntype {name} analysis of variance ({how} method):\n"
                    f"  {'':<20} {'Sum Sq':>10} {'Mean Sq':>10} {'NumDF':>5} {'DenDF':>9} "
                    f"{'F value':>9} {'Pr(>F)':>10}")
            out += "".join(f"\n  {t:<20} {ss:10.4f} {ms:10.4f} {q:5d} {ddf:9.2f} {f:9.4f} "
                           f"{p:10.3g}" for t, (ss, ms, q, ddf, f, p) in table.items())
        if self.ls_means is not None:
            out += "\n" + repr(self.ls_means)
        if self.resid_quantiles is not None:
            q = "  ".join(f"{v:.4f}" for v in self.resid_quantiles)
            out += f"\nscaled residuals (min, 1Q, median, 3Q, max): {q}"
        if self.status not in ("polished", "exact"):
            out += f"\nNOT polished: {self.polish_error}"
        if self.warning:
            out += f"\nwarning: {self.warning}"
        return out

    def _factor_names(self) -> List[str]:
        return list(self.groups) if isinstance(self.groups, dict) else ["groups"]
