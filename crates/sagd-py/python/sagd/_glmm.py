"""`sagd.glmm`: generalised linear mixed models from numpy arrays, fitted in Rust."""

from __future__ import annotations

import math
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._arrays import _Arrays, _per_factor
from ._common import FitResult, _progress, _say_kept, _threads, _whole
from ._glmm_result import GlmmResult
from ._ls_means import LsMeansResult


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
    anova_type: Any = None,
    ls_means: Optional[str] = None,
    ls_means_level: float = 0.95,
    ls_means_scale: str = "link",
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
            ``satterthwaite``; with a formula, each term's type III F test too (lmerTest's
            ``anova(fit)``, categorical variables under sum-to-zero contrasts), in
            ``anova_type3``. ``"kenward-roger"``: the same tests by Kenward and Roger's method
            (lmerTest's ``ddf="Kenward-Roger"``, pbkrtest's; ``reml=True``, no weights), the
            standard errors those of beta's adjusted covariance, in ``kenward_roger`` and
            ``anova_type3``.
        anova_type: with ``ddf``, the type of the terms' F tests (lmerTest's ``anova(fit,
            type=...)``): 3 (the default), 2 (each term adjusted for every term that does not
            contain it) or 1 (sequential, in the formula's order), in ``anova_type3``,
            ``anova_type2`` or ``anova_type1``. Refused without ``ddf``.
        ls_means: ``"means"`` (or ``True``): with a formula, lmerTest's ``ls_means(fit)``, the
            least-squares mean of each combination of the levels of every term of categorical
            columns (over every level of the other categorical columns, each as often, and
            numeric columns at their means), with t tests and intervals at ``ls_means_level``:
            Gaussian fits by Satterthwaite's degrees of freedom (Kenward and Roger's with
            ``ddf="kenward-roger"``), other families by Wald z tests on the link's scale;
            ``"pairwise"``: each pair's difference within a term. Text columns and ``C(x)``
            are categorical. In ``ls_means``; the same table as ``sagd glmm --ls-means``.
        ls_means_scale: ``"link"`` (the default) or ``"response"`` (emmeans' ``type =
            "response"``): a Poisson or binomial fit's means as rates or probabilities, their
            standard errors by the delta method and their intervals mapped from the link's, and
            pairwise ratios of rates or odds ratios (named ``"a / b"``); the tests stay the
            link's.

    Returns:
        A :class:`GlmmResult`.

    Raises:
        ValueError: shapes that disagree, values that are not finite, counts that are not whole.
        KeyboardInterrupt: Ctrl-C during the fit.
    """
    ddf = _check_options(family, method, reml, profile, ddf,
                         (bootstrap, bootstrap_level, checkpoint, weights))
    ls_means = _check_ls_means(ls_means, ls_means_level, family, method, y)
    kind = _anova_kind(anova_type, ddf)
    formula, dropped, rows, spec = None, 0, None, None
    # What a refit of another formula on the same data needs (sagd.step's).
    source = dict(data=data, offset=offset, weights=weights) if isinstance(y, str) else None
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
            weights = _weights_of(d, data, weights)
        z_names = d.z_names[0] if len(d.z_names) == 1 else d.z_names
    elif data is not None:
        raise ValueError("data: only with a formula, e.g. sagd.glmm('y ~ x + (1 | g)', data=df)")
    from ._formula import anova_terms, ls_means_coding, type3_coding

    # The fit stands without the tables; the result says why.
    table = spec is not None and ddf is not None
    type3, type3_note = _coded("type III table", table and kind == 3,
                               lambda: type3_coding(spec, data, rows))
    terms12 = anova_terms(spec, kind) if table and kind != 3 else None
    lsm, lsm_note = _coded("least-squares means", ls_means is not None,
                           lambda: ls_means_coding(spec, data, rows))
    a = _Arrays.of(y, X, groups, family, Z, trials, correlated, offset, weights)
    n, factor_names, k, labels, Xm = a.n, a.factor_names, a.k, a.labels, a.X
    p = Xm.shape[1]
    xn, zn = _names(a, x_names, z_names)
    terms = list(zip(factor_names, zn))
    core = a.core()
    show, close = _progress(progress, 50 * (max_msteps or 20), "sagd.glmm")
    boot_show, boot_close = _progress(bool(progress) and bootstrap is not None, bootstrap,
                                      "sagd.glmm bootstrap")
    try:
        d = _core.fit_glmm(**core, x_names=xn, terms=terms,
                           seed=_whole("seed", seed), threads=_threads(threads),
                           max_msteps=(None if max_msteps is None
                                       else _whole("max_msteps", max_msteps, 1)),
                           progress=show, method=str(method), reml=bool(reml), nodes=nodes,
                           ranef_draws=_whole("ranef_draws", ranef_draws),
                           profile=None if profile is None else float(profile),
                           simulate=None if simulate is None else _whole("simulate", simulate, 1),
                           bootstrap=(None if bootstrap is None
                                      else _whole("bootstrap", bootstrap, 2)),
                           bootstrap_progress=boot_show, satterthwaite=ddf == "satterthwaite",
                           kenward_roger=ddf == "kenward-roger", type3=type3,
                           anova_terms=terms12,
                           ls_means=lsm, ls_means_pairwise=ls_means == "pairwise",
                           ls_means_level=float(ls_means_level),
                           ls_means_response=_ls_means_scale(ls_means_scale, ls_means),
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
    _notes(base, d, dropped)
    for note in (type3_note, lsm_note):
        if note:
            _warn(base, note)
    per_factor = {f: _per_factor_arrays(d.get(f), factor_names, k)
                  for f in ("ranef", "ranef_sd", "ranef_mean", "ranef_mean_sd", "ranef_mean_mcse")}
    return GlmmResult(
        **{f: getattr(base, f) for f in FitResult.__dataclass_fields__},
        **_fit_items(d, base, p, family),
        formula=formula,
        n_obs=n,
        groups=labels[0] if k == 1 else dict(zip(factor_names, labels)),
        **per_factor,
        rows=rows,
        confint=_confint(d.get("profile"), d["names"], terms),
        confint_level=None if d.get("profile") is None else float(profile),
        **_bootstrapped(d, terms, float(bootstrap_level)),
        _spec=spec,
        _model=dict(core=core, method=str(method), nodes=nodes, max_msteps=max_msteps,
                    x_names=xn, terms=terms, source=source),
    )


def _fit_items(d: Dict[str, Any], base: FitResult, p: int, family: str) -> Dict[str, Any]:
    """The result's fields that the core's dict gives (with ``base``, its estimate and errors,
    and ``p`` fixed effects): how the fit was made, its criteria, the fixed effects, the sds
    and correlations (their errors by the delta method, the core's), the fitted values and
    residuals, the simulations and lmerTest's tests."""
    reml_ll = d.get("reml_loglik")
    return dict(
        method="exact" if d["status"] == "exact" else "em",
        reml=reml_ll is not None,
        reml_loglik=reml_ll,
        aic=d.get("aic"),
        bic=d.get("bic"),
        iterations=int(d.get("iterations", 0)),
        family=family.lower(),
        fixed=base.estimate[:p].copy(),
        fixed_se=base.se[:p].copy(),
        random_sd=np.asarray(d["random_sd"], dtype=float),
        random_sd_se=np.asarray(d["random_sd_se"], dtype=float),
        random_names=list(d["random_names"]),
        random_cor=[np.asarray(c, dtype=float) for c in d["random_cor"]],
        sigma=d.get("sigma"),
        sigma_se=d.get("sigma_se"),
        loglik=d.get("loglik"),
        loglik_se=d.get("loglik_se"),
        loglik_method=d.get("loglik_method"),
        n_points=int(d.get("n_points", 0)),
        **{f: _array(d.get(f)) for f in ("eta", "fitted", "resid_response", "resid_pearson",
                                         "resid_deviance", "resid_quantiles", "simulations",
                                         "satterthwaite", "kenward_roger")},
        **{f"anova_type{k}": _anova_table(d.get(f"anova_type{k}"), d.get("sigma"))
           for k in (1, 2, 3)},
        ls_means=LsMeansResult._of(d.get("ls_means")),
    )


def _check_options(family: str, method: str, reml: bool, profile: Optional[float],
                   ddf: Optional[str], boot: Tuple[Optional[int], float, Any, Any]) -> Optional[str]:
    """Refuses, by name, options that do not go together: profile intervals of REML or EM,
    tests with small-sample degrees of freedom beyond the Gaussian's exact fit (Kenward and
    Roger's beyond an unweighted REML fit), a checkpoint without a bootstrap, levels outside
    (0, 1). The ddf method's name, lowercased."""
    bootstrap, bootstrap_level, checkpoint, weights = boot
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
        ddf = str(ddf).lower().replace("_", "-")
        if ddf not in ("satterthwaite", "kenward-roger"):
            raise ValueError(f"ddf: {ddf!r}: give 'satterthwaite' or 'kenward-roger'")
        if str(family).lower() not in ("gaussian", "normal"):
            raise ValueError(f"ddf: {ddf}'s degrees of freedom are the Gaussian family's t "
                             "and F tests (lmerTest's); other families have Wald z tests")
        if str(method) == "em":
            raise ValueError("ddf: the tests need the exact likelihood; leave out method='em'")
        if ddf == "kenward-roger" and not reml:
            raise ValueError("ddf: Kenward and Roger's method is for REML fits (pbkrtest's, "
                             "lmerTest's); add reml=True, or use ddf='satterthwaite'")
        if ddf == "kenward-roger" and weights is not None:
            raise ValueError("ddf: pbkrtest's Kenward-Roger leaves prior weights out of the "
                             "covariance, so sagd has no reference for it with weights; use "
                             "ddf='satterthwaite'")
    if checkpoint is not None and bootstrap is None:
        raise ValueError("checkpoint: it keeps the bootstrap's refits; give bootstrap=N too")
    if bootstrap is not None and not 0 < float(bootstrap_level) < 1:
        raise ValueError(f"bootstrap_level: {bootstrap_level}: give the intervals' level between "
                         "0 and 1, e.g. 0.95")
    return ddf


def _ls_means_scale(scale: str, ls_means: Optional[str]) -> bool:
    """Whether the means are asked on the response's scale; another scale, or one without
    ``ls_means``, is refused by name."""
    if str(scale) not in ("link", "response"):
        raise ValueError(f"ls_means_scale: {scale!r}: give 'link' or 'response'")
    if scale == "response" and ls_means is None:
        raise ValueError("ls_means_scale: give ls_means too")
    return scale == "response"


def _coded(what: str, asked: bool, code: Any) -> Tuple[Any, Optional[str]]:
    """``code()`` where ``asked``: a formula coding for a table of tests, or None and the note
    that says why there is no ``what``."""
    if not asked:
        return None, None
    try:
        return code(), None
    except Exception as e:
        return None, f"no {what}: {e}"


def _check_ls_means(ls_means: Any, level: float, family: str, method: str,
                    y: Any) -> Optional[str]:
    """``ls_means`` as ``"means"`` or ``"pairwise"`` (None without it), refused by name without
    a formula, with another value, a level outside (0, 1) or a Gaussian fit by EM (whose tests
    need the exact likelihood)."""
    if ls_means is None or ls_means is False:
        return None
    asked = "means" if ls_means is True else str(ls_means).lower()
    if asked not in ("means", "pairwise"):
        raise ValueError(f"ls_means: {ls_means!r}: give 'means' (or True) or 'pairwise'")
    if not isinstance(y, str):
        raise ValueError("ls_means: the means' reference grid is a formula's variables; give "
                         "the model as a formula with data=")
    if not 0 < float(level) < 1:
        raise ValueError(f"ls_means_level: {level}: give the intervals' level between 0 and 1, "
                         "e.g. 0.95")
    if str(family).lower() in ("gaussian", "normal") and str(method) == "em":
        raise ValueError("ls_means: a Gaussian model's tests need the exact likelihood; leave "
                         "out method='em'")
    return asked


def _weights_of(d: Any, data: Any, weights: Any) -> np.ndarray:
    """A formula fit's prior weights on the rows it keeps: ``data``'s column of that name, or
    one value per row of ``data``; refused where a kept row has none."""
    column = isinstance(weights, str)
    if column and weights not in data:
        raise ValueError(f"weights: no column {weights!r} in data; give one of "
                         f"{', '.join(map(str, list(data)))}")
    kept = d.kept(data[weights] if column else weights, "weights")
    if np.isnan(kept).any():
        raise ValueError("weights: a missing weight on a row the model uses; give every "
                         "such row a weight, or drop it from data")
    return kept


def _names(a: _Arrays, x_names: Optional[Sequence[str]],
           z_names: Any) -> Tuple[List[str], List[List[str]]]:
    """The names of X's columns and of each factor's effects: those given, else a column of
    ones is R's (Intercept), a column of Z that is one of X's takes its name, and the rest are
    x0, x1, ... and z0, z1, ..."""
    Xm, p = a.X, a.X.shape[1]
    xn = [str(v) for v in x_names] if x_names is not None else [
        "(Intercept)" if np.all(Xm[:, j] == 1) else f"x{j}" for j in range(p)]
    if a.k == 1:
        zn_all = [z_names]
    else:
        zn_all = [None] * a.k if z_names is None else _per_factor("z_names", list(z_names), a.k)
    zn = []
    for Zt, names_t in zip(a.Zs, zn_all):
        if names_t is None:
            names_t = [next((xn[i] for i in range(p) if np.array_equal(Zt[:, j], Xm[:, i])),
                            "(Intercept)" if np.all(Zt[:, j] == 1) else f"z{j}")
                       for j in range(Zt.shape[1])]
        zn.append([str(v) for v in names_t])
    return xn, zn


def _notes(base: FitResult, d: Dict[str, Any], dropped: int) -> None:
    """The core's notes on a fit as warnings: a singular fit, what could not be computed,
    unmixed chains, separated responses, the rows dropped."""
    if d.get("singular"):
        # A covariance at its boundary (the core's rule and words): the parameter there has no
        # finite maximum, and no standard error.
        _warn(base, d["singular_note"])
    if d.get("ranef_error"):
        _warn(base, f"no ranef: {d['ranef_error']}")
    if d.get("fitted_error"):
        _warn(base, f"no fitted values: {d['fitted_error']}")
    if d.get("ddf_error"):
        _warn(base, f"no tests with ddf: {d['ddf_error']}")
    if d.get("ls_means_error"):
        _warn(base, f"no least-squares means: {d['ls_means_error']}")
    if d.get("profile_error"):
        _warn(base, f"no profile intervals: {d['profile_error']}")
    if d.get("ranef_mean_rhat", 1.0) > 1.01:
        _warn(base, f"ranef_mean is sampled and its chains have not mixed (R-hat "
                    f"{d['ranef_mean_rhat']:.3f} > 1.01): refit with more ranef_draws")
    if d.get("separation_note"):
        # Separated responses (the core's rule and words): some β have no finite maximum.
        _warn(base, d["separation_note"])
    if dropped:
        _warn(base, f"{dropped} rows with a missing value dropped (lme4's na.omit)")


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


def _anova_kind(anova_type: Any, ddf: Optional[str]) -> int:
    """lmerTest's type of an F table, 1, 2 or 3 (as a number, its digit or its Roman
    numeral; 3 when None); another, or one without ``ddf``, is refused by name."""
    if anova_type is None:
        return 3
    if ddf is None:
        raise ValueError("anova_type: the terms' F tests come with ddf; add "
                         "ddf='satterthwaite' (or 'kenward-roger' with reml=True)")
    kinds = {"1": 1, "2": 2, "3": 3, "I": 1, "II": 2, "III": 3}
    kind = kinds.get(str(anova_type).upper())
    if kind is None:
        raise ValueError(f"anova_type: {anova_type!r}: give 1, 2 or 3 (lmerTest's types I, II "
                         "and III)")
    return kind


def _anova_table(tests: Optional[List[Any]], sigma: Optional[float]
                 ) -> Optional[Dict[str, Tuple[float, float, int, float, float, float]]]:
    """lmerTest's type I, II or III table from the core's F tests (term, F, NumDF, DenDF, p, the
    unscaled F): per term its Sum Sq, Mean Sq (the unscaled F sigma^2, as lmerTest's: Kenward
    and Roger's F is scaled), NumDF, DenDF, F value and Pr(>F)."""
    if tests is None or sigma is None:
        return None
    s2 = float(sigma) ** 2
    return {str(t): (float(fu) * s2 * int(q), float(fu) * s2, int(q), float(ddf), float(f),
                     float(p)) for t, f, q, ddf, p, fu in tests}


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
