"""`sagd.glmm`: generalised linear mixed models from numpy arrays, fitted in Rust."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._arrays import _Arrays, _per_factor
from ._common import FitResult, _progress, _say_kept, _table, _threads, _whole


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


def glmm_loglik(
    theta: Any,
    y: Any,
    X: Any = None,
    groups: Any = None,
    family: str = "gaussian",
    Z: Any = None,
    trials: Any = None,
    *,
    correlated: Any = False,
    seed: int = 0,
    offset: Any = None,
    weights: Any = None,
) -> Tuple[float, float, str]:
    """The log-likelihood of a GLMM at ``theta``, every constant included as lme4's: exact
    where it can be (quadrature with up to 3 random effects per independent block, the closed
    form for the Gaussian family), else by importance sampling. Use it to compare any
    estimate, another tool's included, on the exact likelihood.

    Args:
        theta: on :class:`GlmmResult`'s internal scale (beta; per grouping factor, log of the
            diagonal of the Cholesky factor L of its effects' covariance, then, when
            correlated, L's lower off-diagonal row by row; log sigma).
        y, X, groups, family, Z, trials, correlated, offset, weights: as :func:`glmm`.
        seed: fixes the importance sampler's draws (unused when exact).

    Returns:
        (log-likelihood, its Monte Carlo error (0 when exact), how it was computed).
    """
    a = _Arrays.of(y, X, groups, family, Z, trials, correlated, offset, weights)
    return _core.glmm_loglik(**a.core(), theta=[float(v) for v in np.asarray(theta, dtype=float)],
                             seed=_whole("seed", seed))


def glmm(
    y: Any,
    X: Any = None,
    groups: Any = None,
    family: str = "gaussian",
    Z: Any = None,
    trials: Any = None,
    *,
    correlated: Any = False,
    seed: int = 0,
    threads: Optional[int] = None,
    max_msteps: Optional[int] = None,
    x_names: Optional[Sequence[str]] = None,
    z_names: Any = None,
    progress: bool = False,
    method: str = "auto",
    reml: bool = False,
    nodes: Optional[int] = None,
    data: Any = None,
    ranef_draws: int = 500,
    offset: Any = None,
    weights: Any = None,
    profile: Optional[float] = None,
    simulate: Optional[int] = None,
    bootstrap: Optional[int] = None,
    bootstrap_level: float = 0.95,
    ddf: Optional[str] = None,
    checkpoint: Any = None,
    checkpoint_every: int = 100,
    _interrupt_after: Optional[int] = None,
) -> GlmmResult:
    """Fits a generalised linear mixed model by maximum likelihood: directly where the likelihood
    can be computed exactly, else by automated Monte Carlo EM.

    y_i | b ~ family(eta_i), eta_i = X_i beta + sum over grouping factors t of Z_t,i b_t,g_t(i),
    b_t,l ~ N(0, Sigma_t) for each level l of factor t: lme4's ``glmer(y ~ X + (Z_1 || g_1) +
    (Z_2 || g_2) ...)``, with ``(Z | g)`` (a full Sigma_t) where ``correlated``. Factors may be
    nested or crossed.

    With a formula, lme4's way: ``sagd.glmm("y ~ x + (1 + x | g)", data=df, family="poisson")``
    (pandas and formulaic needed): the fixed effects and each term's effects by formulaic's
    model matrices (categorical columns, interactions, ``I(...)``, ``0 +`` for no intercept),
    ``(Z | g)`` correlated and ``(Z || g)`` independent effects, ``a:b`` and ``a/b`` (nested)
    grouping factors, ``cbind(successes, failures)`` as a binomial response, ``offset(expr)``
    among the fixed effects (``offset(log(t))``: a known part of eta, such as the log of an
    exposure); rows with a missing value in the formula's variables are dropped (lme4's
    ``na.omit``) and the result says how many.

    Args:
        y: the responses (n values): real for ``"gaussian"``, counts for ``"poisson"``,
            successes for ``"binomial"`` (0/1 for Bernoulli); or a formula (then ``data``, and
            no ``X``, ``groups``, ``Z``, ``trials`` or ``correlated``).
        X: the fixed-effects design (n x p), including the intercept column if you want one;
            None: an intercept alone.
        groups: the group of each observation (n labels of any kind); for several grouping
            factors, a list of such arrays or a dict name -> labels.
        family: ``"gaussian"``, ``"poisson"`` or ``"binomial"``.
        Z: the random-effects design (n x q); None: a random intercept. With several factors,
            one design for all or a list with one per factor (None entries: an intercept).
        trials: binomial only, the trials behind each y (default 1).
        correlated: whether a factor's effects are correlated (a full covariance) or
            independent; one flag for all factors or a list with one per factor.
        seed: the random seed; the same seed gives the same result on any number of threads.
        threads: worker threads (default: all cores).
        max_msteps: the most M-steps of EM before the polish (default 20; with ``method="auto"``
            the polish starts at Laplace's maximum without an M-step, and EM runs only if
            that polish fails).
        x_names: names of X's columns; z_names: of Z's columns (a list per factor with several).
        progress: show a progress bar (tqdm's, when installed) of EM's updates.
        method: ``"auto"`` (default): the exact likelihood maximised directly where it can be
            computed to rounding, as lme4 does (the Gaussian family by its closed form; other
            families with at most 3 random effects per independent block, by adaptive
            Gauss-Hermite quadrature at each block's mode, as glmer's nAGQ), otherwise automated
            Monte Carlo EM with Langevin chains (crossed non-Gaussian factors, larger blocks),
            started at the maximum of Laplace's approximation (glmer's estimate);
            ``"exact"``: the direct fit or an error saying why not; ``"em"``: always EM, from the
            built-in start.
        reml: Gaussian family only: maximise the REML criterion (lmer's default) instead of the
            likelihood. Default False (maximum likelihood, comparable across models by AIC).
        nodes: quadrature nodes per random effect for an exact non-Gaussian fit (default 25,
            15, 9 with 1, 2, 3 effects per block).
        data: with a formula, the data frame (or anything ``pandas.DataFrame`` takes).
        ranef_draws: draws a chain for the conditional means of blocks too large to integrate
            (``ranef_mean`` of crossed factors; default 500, 0 for none).
        offset: a known part of each observation's eta (n finite values; glmer's ``offset``),
            such as ``np.log(exposure)`` for Poisson rates; with a formula, added to its
            ``offset(...)`` terms, as R adds them.
        weights: prior weights (lme4's ``weights``): n positive values, or with a formula the
            name of a column of ``data`` (or one value per row of it). Gaussian family:
            observation i's residual variance sigma^2 / w_i, as for the mean of w_i
            measurements. Binomial family: observation i's number of trials, y then the
            proportion of them that succeeded (``glmer(prop ~ ..., weights = n)``; simulations
            are proportions too).
        profile: a level (e.g. 0.95) for profile-likelihood confidence intervals (lme4's
            ``confint(fit)``) from the exact likelihood, in ``confint``; exact maximum-likelihood
            fits only (not ``reml=True`` or ``method="em"``; a fit that falls back to EM says
            so in ``warning``).
        simulate: a number of draws of new responses from the fitted model (lme4's
            ``simulate(fit, nsim)``: every level's effects drawn afresh, then each response
            from its family), in ``simulations``, from ``seed``.
        bootstrap: a number of refits for the parametric bootstrap (lme4's ``bootMer`` and
            ``confint(fit, method = "boot")``): responses drawn from the fitted model, each
            fitted again the way the model was (any method, REML too), from ``seed``; the same
            refits on any number of threads. In ``bootstrap`` and ``confint_boot``.
        bootstrap_level: the level of ``confint_boot``'s intervals (default 0.95).
        checkpoint: with ``bootstrap``, a file that keeps the refits, written after every
            ``checkpoint_every`` of them (default 100): a bootstrap stopped by Ctrl-C keeps
            them there, and the same call goes on from there (where the file holds another
            fit's or another seed's refits it is refused by name) and ends with the replicates
            of an uninterrupted run.
        ddf: ``"satterthwaite"``: Gaussian family, exact fit (ML or REML): the fixed effects'
            t tests with Satterthwaite's degrees of freedom (lmerTest's ``summary(fit)``), in
            ``satterthwaite``.

    Returns:
        A :class:`GlmmResult`.

    Raises:
        ValueError: shapes that disagree, values that are not finite, counts that are not whole.
        KeyboardInterrupt: Ctrl-C during the fit.
    """
    if profile is not None:
        if not 0 < float(profile) < 1:
            raise ValueError(f"profile: {profile}: give the intervals' level between 0 and 1, "
                             "e.g. 0.95")
        if reml:
            raise ValueError("profile: the intervals profile the likelihood, not REML's "
                             "criterion; leave out reml=True")
        if str(method) == "em":
            raise ValueError("profile: the intervals need the exact likelihood; leave out "
                             "method='em'")
    if ddf is not None:
        if str(ddf).lower() != "satterthwaite":
            raise ValueError(f"ddf: {ddf!r}: the one method is 'satterthwaite'")
        if str(family).lower() not in ("gaussian", "normal"):
            raise ValueError("ddf: Satterthwaite's degrees of freedom are the Gaussian family's "
                             "t tests (lmerTest's); other families have Wald z tests")
        if str(method) == "em":
            raise ValueError("ddf: the tests need the exact likelihood; leave out method='em'")
    if checkpoint is not None and bootstrap is None:
        raise ValueError("checkpoint: it keeps the bootstrap's refits; give bootstrap=N too")
    if bootstrap is not None and not 0 < float(bootstrap_level) < 1:
        raise ValueError(f"bootstrap_level: {bootstrap_level}: give the intervals' level between "
                         "0 and 1, e.g. 0.95")
    formula, dropped, rows, spec = None, 0, None, None
    if isinstance(y, str):
        if any(v is not None for v in (X, groups, Z, trials)) or correlated is not False:
            raise ValueError("with a formula, give the model in it alone: no X, groups, Z, "
                             "trials or correlated")
        from ._formula import parse

        formula, d = y, parse(y, data)
        spec = d.spec
        y, X, groups, Z, trials, correlated = d.y, d.X, d.groups, d.Z, d.trials, d.correlated
        x_names, dropped, rows = d.x_names, d.dropped, d.rows
        # R's rule: the formula's offsets and the argument's are summed, on the rows kept.
        extra = None if offset is None else d.kept(offset, "offset")
        offset = d.offset if extra is None else extra if d.offset is None else d.offset + extra
        if weights is not None:
            column = isinstance(weights, str)
            if column and weights not in data:
                raise ValueError(f"weights: no column {weights!r} in data; give one of "
                                 f"{', '.join(map(str, list(data)))}")
            weights = d.kept(data[weights] if column else weights, "weights")
            if np.isnan(weights).any():
                raise ValueError("weights: a missing weight on a row the model uses; give every "
                                 "such row a weight, or drop it from data")
        z_names = d.z_names[0] if len(d.z_names) == 1 else d.z_names
    elif data is not None:
        raise ValueError("data: only with a formula, e.g. sagd.glmm('y ~ x + (1 | g)', data=df)")
    a = _Arrays.of(y, X, groups, family, Z, trials, correlated, offset, weights)
    n, factor_names, k, labels, Xm, Zs = a.n, a.factor_names, a.k, a.labels, a.X, a.Zs
    p = Xm.shape[1]
    # Unnamed columns: a column of ones is R's (Intercept); a column of Z that is one of X's
    # takes its name.
    xn = [str(v) for v in x_names] if x_names is not None else [
        "(Intercept)" if np.all(Xm[:, j] == 1) else f"x{j}" for j in range(p)]
    if k == 1:
        zn_all = [z_names]
    else:
        zn_all = [None] * k if z_names is None else _per_factor("z_names", list(z_names), k)
    zn = []
    for Zt, names_t in zip(Zs, zn_all):
        if names_t is None:
            names_t = [next((xn[i] for i in range(p) if np.array_equal(Zt[:, j], Xm[:, i])),
                            "(Intercept)" if np.all(Zt[:, j] == 1) else f"z{j}")
                       for j in range(Zt.shape[1])]
        zn.append([str(v) for v in names_t])
    core = a.core()
    show, close = _progress(progress, 50 * (max_msteps or 20), "sagd.glmm")
    boot_show, boot_close = _progress(bool(progress) and bootstrap is not None, bootstrap,
                                      "sagd.glmm bootstrap")
    try:
        d = _core.fit_glmm(**core, x_names=xn, terms=list(zip(factor_names, zn)),
                           seed=_whole("seed", seed), threads=_threads(threads),
                           max_msteps=(None if max_msteps is None
                                       else _whole("max_msteps", max_msteps, 1)),
                           progress=show, method=str(method), reml=bool(reml), nodes=nodes,
                           ranef_draws=_whole("ranef_draws", ranef_draws),
                           profile=None if profile is None else float(profile),
                           simulate=None if simulate is None else _whole("simulate", simulate, 1),
                           bootstrap=(None if bootstrap is None
                                      else _whole("bootstrap", bootstrap, 2)),
                           bootstrap_progress=boot_show, satterthwaite=ddf is not None,
                           checkpoint=None if checkpoint is None else os.fspath(checkpoint),
                           checkpoint_every=_whole("checkpoint_every", checkpoint_every, 1),
                           interrupt_after=_interrupt_after)
    except KeyboardInterrupt as stop:
        _say_kept(stop, checkpoint)
    finally:
        close()
        boot_close()
    # θ's names and the sds' labels come from the core (`Glmm::theta_names`, `effect_names`).
    base = FitResult._of(d, d["names"])
    est = base.estimate
    # The sds' standard errors (delta method) and the correlations come from the core.
    tau = np.asarray(d["random_sd"], dtype=float)
    cors = [np.asarray(c, dtype=float) for c in d["random_cor"]]
    if d.get("singular"):
        # A covariance at its boundary (the core's rule and words): the parameter there has no
        # finite maximum, and no standard error.
        _warn(base, d["singular_note"])
    if d.get("ranef_error"):
        _warn(base, f"no ranef: {d['ranef_error']}")
    if d.get("fitted_error"):
        _warn(base, f"no fitted values: {d['fitted_error']}")
    if d.get("profile_error"):
        _warn(base, f"no profile intervals: {d['profile_error']}")
    if d.get("ranef_mean_rhat", 1.0) > 1.01:
        _warn(base, f"ranef_mean is sampled and its chains have not mixed (R-hat "
                    f"{d['ranef_mean_rhat']:.3f} > 1.01): refit with more ranef_draws")
    if d.get("separation_note"):
        # Separated responses (the core's rule and words): some β have no finite maximum.
        _warn(base, d["separation_note"])
    exact = d["status"] == "exact"
    reml_ll = d.get("reml_loglik")
    if dropped:
        _warn(base, f"{dropped} rows with a missing value dropped (lme4's na.omit)")
    return GlmmResult(
        **{f: getattr(base, f) for f in FitResult.__dataclass_fields__},
        formula=formula,
        n_obs=n,
        method="exact" if exact else "em",
        reml=reml_ll is not None,
        reml_loglik=reml_ll,
        aic=d.get("aic"),
        bic=d.get("bic"),
        iterations=int(d.get("iterations", 0)),
        family=family.lower(),
        fixed=est[:p].copy(),
        fixed_se=base.se[:p].copy(),
        random_sd=tau,
        random_sd_se=np.asarray(d["random_sd_se"], dtype=float),
        random_names=list(d["random_names"]),
        random_cor=cors,
        sigma=d.get("sigma"),
        sigma_se=d.get("sigma_se"),
        loglik=d.get("loglik"),
        loglik_se=d.get("loglik_se"),
        loglik_method=d.get("loglik_method"),
        groups=labels[0] if k == 1 else dict(zip(factor_names, labels)),
        n_points=int(d.get("n_points", 0)),
        ranef=_per_factor_arrays(d.get("ranef"), factor_names, k),
        ranef_sd=_per_factor_arrays(d.get("ranef_sd"), factor_names, k),
        ranef_mean=_per_factor_arrays(d.get("ranef_mean"), factor_names, k),
        ranef_mean_sd=_per_factor_arrays(d.get("ranef_mean_sd"), factor_names, k),
        ranef_mean_mcse=_per_factor_arrays(d.get("ranef_mean_mcse"), factor_names, k),
        **{f: _array(d.get(f)) for f in ("eta", "fitted", "resid_response", "resid_pearson",
                                         "resid_deviance", "resid_quantiles")},
        rows=rows,
        confint=_confint(d.get("profile"), d["names"], list(zip(factor_names, zn))),
        confint_level=None if d.get("profile") is None else float(profile),
        simulations=None if d.get("simulations") is None else np.asarray(d["simulations"],
                                                                          dtype=float),
        satterthwaite=_array(d.get("satterthwaite")),
        **_bootstrapped(d, list(zip(factor_names, zn)), float(bootstrap_level)),
        _spec=spec,
        _model=dict(core=core, method=str(method), nodes=nodes, max_msteps=max_msteps,
                    x_names=xn, terms=list(zip(factor_names, zn))),
    )


def _summary_name(name: str, terms: List[Tuple[str, List[str]]]) -> Tuple[str, bool]:
    """The summary's name of theta's entry ``name``, and whether theta holds its log: the fixed
    effects as they are, ``sd ...`` and ``sigma`` (from ``log sd ...`` and ``log(sigma)``), and in
    the place ``L[a,b] g`` of a correlated factor ``g`` the correlation of its effects b and a,
    ``cor [g: ]eb:ea`` (the factor's name where the model has several, as the sds')."""
    cor = re.match(r"^L\[(\d+),(\d+)\] (.*)$", name)
    if cor:
        a, b, group = int(cor.group(1)), int(cor.group(2)), cor.group(3)
        effects = dict(terms)[group]
        prefix = f"{group}: " if len(terms) > 1 else ""
        return f"cor {prefix}{effects[b]}:{effects[a]}", False
    if name.startswith("log sd ") or name == "log(sigma)":
        return ("sigma" if name == "log(sigma)" else name[len("log "):]), True
    return name, False


def _confint(profile: Optional[List[Any]], names: List[str],
             terms: List[Tuple[str, List[str]]]) -> Optional[Dict[str, Tuple[float, float]]]:
    """The core's intervals in theta's places (None where not profiled) on the summary's
    scales, named as the summary names them."""
    if profile is None:
        return None
    out = {}
    for name, ends in zip(names, profile):
        if ends is None:
            continue
        lo, hi = float(ends[0]), float(ends[1])
        name, log = _summary_name(name, terms)
        out[name] = (math.exp(lo), math.exp(hi)) if log else (lo, hi)
    return out


def _bootstrapped(d: Dict[str, Any], terms: List[Tuple[str, List[str]]],
                  level: float) -> Dict[str, Any]:
    """The bootstrap's items of a GlmmResult from the core's refits (on the summary's scales,
    in theta's order): the refits, their names, the failed draws and the percentile
    intervals at ``level``."""
    if d.get("bootstrap") is None:
        return {}
    reps = np.asarray(d["bootstrap"], dtype=float).reshape(len(d["bootstrap"]), -1)
    names = [_summary_name(n, terms)[0] for n in d["names"]]
    failed = {int(k): str(why) for k, why in d["bootstrap_failed"]}
    ok = reps[~np.isnan(reps).any(axis=1)]
    tail = (1 - level) / 2
    intervals = None if len(ok) == 0 else {
        n: (float(np.quantile(ok[:, j], tail)), float(np.quantile(ok[:, j], 1 - tail)))
        for j, n in enumerate(names)}
    return dict(bootstrap=reps, bootstrap_names=names, bootstrap_failed=failed,
                confint_boot=intervals, confint_boot_level=level)


def _array(v: Any) -> Optional[np.ndarray]:
    """`v` as an array of floats, None kept."""
    return None if v is None else np.asarray(v, dtype=float)


def _warn(result: FitResult, note: str) -> None:
    """Puts `note` before the warnings `result` already has."""
    result.warning = note if result.warning is None else f"{note}; {result.warning}"


def _per_factor_arrays(per_term: Optional[List[Any]], factor_names: List[str], k: int) -> Any:
    """One (levels x effects) array per grouping factor: the array itself for one factor, else
    a dict factor -> array (None where the core found none)."""
    if per_term is None:
        return None
    arrays = [np.asarray(t, dtype=float).reshape(len(t), -1) for t in per_term]
    return arrays[0] if k == 1 else dict(zip(factor_names, arrays))
