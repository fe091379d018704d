"""sagd: maximum likelihood for latent-variable models by automated Monte Carlo EM.

Each M-step of EM is a run of Stochastic Approximate Gradient Descent (Qiu and Wang, AAAI 2020):
gradients from short underdamped Langevin chains on every data point's posterior, Newton steps,
and a final polish that brings the estimate to the maximum of the log-likelihood with standard
errors (each with its own Monte Carlo error).

Two entry points:

* :func:`glmm` fits a generalised linear mixed model (Gaussian, Poisson, binomial) from numpy
  arrays, with every gradient computed in Rust.
* :func:`fit` fits your own model, given as a Python function that returns log p(x_i, z; theta)
  and its gradients for a whole block of chains at once.

* :func:`deconvolve` fits the law of Z from observations X = Z + N(0, sigma^2) (the paper's
  debiased VAE: a VAE, then IWAE, HMC and SAGD fine-tuning), with draws of Z back as arrays.
* :func:`minimize` runs Algorithm 1 itself on F(theta) = E_{xi ~ pi_theta} f(theta; xi), pi known
  up to a constant, with Theorem 3's or 4's schedules.

Same ``seed``, same result, whatever ``threads``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _core

__version__ = _core.__version__

__all__ = ["glmm", "fit", "minimize", "deconvolve", "GlmmResult", "FitResult", "MinimizeResult",
           "Deconvolution", "__version__"]


def _vector(name: str, value: Any, n: Optional[int] = None) -> np.ndarray:
    """``value`` as a contiguous float64 vector, with a ValueError naming ``name``."""
    try:
        a = np.ascontiguousarray(np.asarray(value, dtype=np.float64))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: not numbers ({e})") from None
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name}: expected {n} values (one per observation), got {a.shape[0]}")
    if not np.all(np.isfinite(a)):
        bad = int(np.flatnonzero(~np.isfinite(a))[0])
        raise ValueError(f"{name}: {a[bad]} at position {bad}; remove or impute it")
    return a


def _matrix(name: str, value: Any, n: int) -> np.ndarray:
    """``value`` as a contiguous float64 n x k matrix (a vector is one column)."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: not numbers ({e})") from None
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] != n:
        raise ValueError(f"{name}: expected {n} rows (one per observation), got shape {a.shape}")
    if a.shape[1] == 0:
        raise ValueError(f"{name}: needs at least one column")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: contains values that are not finite; remove or impute them")
    return np.ascontiguousarray(a)


def _progress(enabled: bool, total: Optional[int], desc: str):
    """A progress callback (work done so far) and its closer: tqdm's bar when tqdm is installed
    (in a terminal or in Jupyter), else a line on stderr every 2 s; nothing when not enabled."""
    if not enabled:
        return None, lambda: None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        import sys
        import time

        last = [0.0]

        def line(done: int) -> None:
            now = time.monotonic()
            if now - last[0] >= 2.0:
                last[0] = now
                of = f"/{total}" if total else ""
                print(f"{desc}: {done}{of} updates", file=sys.stderr, flush=True)

        return line, lambda: None
    bar = tqdm(total=total, desc=desc, unit="update")
    return (lambda done: bar.update(done - bar.n)), bar.close


def _table(rows: List[Tuple[str, float, float, float]], title: str) -> str:
    width = max([len(r[0]) for r in rows] + [9])
    lines = [title, f"{'':{width}}  {'estimate':>10}  {'std.err':>9}  {'(MC err)':>9}"]
    for name, est, se, err in rows:
        e = "" if math.isnan(err) else f"{err:9.4f}"
        lines.append(f"{name:{width}}  {est:10.4f}  {se:9.4f}  {e:>9}")
    return "\n".join(lines)


def _arr(d: Dict[str, Any], key: str, p: int) -> np.ndarray:
    v = d.get(key)
    return np.full(p, np.nan) if v is None or len(v) == 0 else np.asarray(v)


@dataclass
class FitResult:
    """The answer of automated EM on a model of your own.

    Attributes:
        estimate: theta-hat, polished to the maximum of the log-likelihood when ``status`` is
            ``"polished"``.
        se: standard errors sqrt(diag(I^-1)) from the observed information (NaN if not polished).
        se_error: each standard error's own Monte Carlo error.
        mc_se: the Monte Carlo error of ``estimate`` itself (from the chains).
        status: ``"polished"``, or ``"polish failed"`` (then ``estimate`` is EM's, and
            ``polish_error`` says why).
        converged: whether EM's own stopping rule was met before the polish.
        msteps: M-steps run.
        path: theta after every update (rows).
        se_at: the theta where the information behind ``se`` was taken (the last Newton point,
            within the Monte Carlo error of ``estimate``).
        chain_rhat: with several chains per point, the largest R-hat of a point's score.
        warning: set when the standard errors are less precise than 10 %, or chains disagree.
    """

    estimate: np.ndarray
    se: np.ndarray
    se_error: np.ndarray
    mc_se: np.ndarray
    status: str
    polish_error: Optional[str]
    converged: bool
    msteps: int
    path: np.ndarray
    se_at: Optional[np.ndarray] = None
    chain_rhat: Optional[float] = None
    warning: Optional[str] = None
    names: List[str] = field(default_factory=list)

    @classmethod
    def _of(cls, d: Dict[str, Any], names: Optional[Sequence[str]] = None) -> "FitResult":
        p = len(d["estimate"])
        return cls(
            estimate=np.asarray(d["estimate"]),
            se=_arr(d, "se", p),
            se_error=_arr(d, "se_error", p),
            mc_se=_arr(d, "mc_se", p),
            status=d["status"],
            polish_error=d.get("polish_error"),
            converged=bool(d["converged"]),
            msteps=int(d["msteps"]),
            path=np.asarray(d["path"]),
            se_at=None if d.get("information_theta") is None else np.asarray(d["information_theta"]),
            chain_rhat=d.get("chain_rhat"),
            warning=d.get("se_warning"),
            names=list(names) if names is not None else [f"theta[{j}]" for j in range(p)],
        )

    def _rows(self) -> List[Tuple[str, float, float, float]]:
        return [
            (n, float(e), float(s), float(r))
            for n, e, s, r in zip(self.names, self.estimate, self.se, self.se_error)
        ]

    def __repr__(self) -> str:
        head = f"sagd fit: {self.status}, {self.msteps} M-steps"
        out = _table(self._rows(), head)
        if self.status != "polished":
            out += f"\nNOT polished: {self.polish_error}"
        if self.warning:
            out += f"\nwarning: {self.warning}"
        return out

    def to_pandas(self):
        """The estimates as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(
            {"estimate": self.estimate, "se": self.se, "se_error": self.se_error,
             "mc_se": self.mc_se},
            index=self.names,
        )


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
            or by importance sampling, with ``loglik_se`` its Monte Carlo error (0 when exact) and
            ``loglik_method`` saying which.
        groups: the group labels (one grouping factor), or a dict factor -> labels.
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

    def __repr__(self) -> str:
        p = len(self.fixed)
        n_groups = (len(self.groups) if not isinstance(self.groups, dict) else
                    " x ".join(str(len(v)) for v in self.groups.values()))
        fixed = _table(self._rows()[:p], f"GLMM ({self.family}), {n_groups} groups: "
                       f"{self.status}, {self.msteps} M-steps")
        sds = [(f"sd {n}", float(t), float(s), math.nan)
               for n, t, s in zip(self.random_names, self.random_sd, self.random_sd_se)]
        if self.sigma is not None:
            sds.append(("sigma", self.sigma, float(self.sigma_se), math.nan))
        out = fixed + "\n" + _table(sds, "random effects and residual (sd scale)")
        for name, cor in zip(self._factor_names(), self.random_cor):
            if cor.shape[0] > 1 and np.any(cor != np.eye(cor.shape[0])):
                rows = "\n".join("  " + " ".join(f"{v:7.3f}" for v in r) for r in cor)
                out += f"\ncorrelations of {name}'s effects:\n{rows}"
        if self.loglik is not None:
            out += f"\nlog-likelihood {self.loglik:.4f}"
            if self.loglik_se:
                out += f" ± {self.loglik_se:.4f} ({self.loglik_method})"
        if self.status != "polished":
            out += f"\nNOT polished: {self.polish_error}"
        if self.warning:
            out += f"\nwarning: {self.warning}"
        return out

    def _factor_names(self) -> List[str]:
        return list(self.groups) if isinstance(self.groups, dict) else ["groups"]


def _factors(groups: Any, n: int) -> Tuple[List[str], List[np.ndarray]]:
    """The grouping factors as (names, label arrays): one array, a list of them, or a dict."""
    if isinstance(groups, dict):
        names, values = [str(k) for k in groups], list(groups.values())
    elif isinstance(groups, (list, tuple)) and len(groups) > 0 and np.ndim(groups[0]) == 1:
        names, values = [f"g{k}" for k in range(len(groups))], list(groups)
    else:
        names, values = ["groups"], [groups]
    arrays = []
    for name, v in zip(names, values):
        a = np.asarray(v)
        if a.ndim != 1 or a.shape[0] != n:
            raise ValueError(f"groups: expected {n} labels (one per observation) for "
                             f"{name}, got shape {a.shape}")
        arrays.append(a)
    if not arrays:
        raise ValueError("groups: give at least one grouping factor")
    return names, arrays


def _per_factor(name: str, value: Any, k: int) -> List[Any]:
    """A per-factor argument: one value for all factors, or a list with one per factor."""
    if isinstance(value, (list, tuple)) and not (k == 1 and np.ndim(value) == 2):
        if len(value) != k:
            raise ValueError(f"{name}: give one per grouping factor ({k}), got {len(value)}")
        return list(value)
    return [value] * k


def _term_params(q: int, correlated: bool) -> int:
    return q + (q * (q - 1) // 2 if correlated else 0)


def _cholesky(par: np.ndarray, q: int, correlated: bool) -> np.ndarray:
    """L from a term's parameters: exp of the diagonal, then the lower off-diagonal row by row."""
    L = np.diag(np.exp(par[:q]))
    if correlated:
        L[np.tril_indices(q, -1)] = par[q:]
    return L


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
) -> GlmmResult:
    """Fits a generalised linear mixed model by automated Monte Carlo EM.

    y_i | b ~ family(eta_i), eta_i = X_i beta + sum over grouping factors t of Z_t,i b_t,g_t(i),
    b_t,l ~ N(0, Sigma_t) for each level l of factor t: lme4's ``glmer(y ~ X + (Z_1 || g_1) +
    (Z_2 || g_2) ...)``, with ``(Z | g)`` (a full Sigma_t) where ``correlated``. Factors may be
    nested or crossed.

    Args:
        y: the responses (n values): real for ``"gaussian"``, counts for ``"poisson"``,
            successes for ``"binomial"`` (0/1 for Bernoulli).
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
        max_msteps: the most M-steps of EM before the polish (default 20).
        x_names: names of X's columns; z_names: of Z's columns (a list per factor with several).
        progress: show a progress bar (tqdm's, when installed) of EM's updates.

    Returns:
        A :class:`GlmmResult`.

    Raises:
        ValueError: shapes that disagree, values that are not finite, counts that are not whole.
        KeyboardInterrupt: Ctrl-C during the fit.
    """
    yv = _vector("y", y)
    n = yv.shape[0]
    if n == 0:
        raise ValueError("y: empty; give at least one observation")
    if groups is None:
        raise ValueError("groups: give the group of each observation")
    factor_names, factors = _factors(groups, n)
    k = len(factors)
    labels, index = zip(*(np.unique(g, return_inverse=True) for g in factors))
    Xm = np.ones((n, 1)) if X is None else _matrix("X", X, n)
    Zs = [np.ones((n, 1)) if z is None else _matrix("Z", z, n) for z in _per_factor("Z", Z, k)]
    cor = [bool(c) and Zt.shape[1] > 1 for c, Zt in zip(_per_factor("correlated", correlated, k),
                                                       Zs)]
    tv = None if trials is None else _vector("trials", trials, n)
    if tv is not None and family.lower() not in ("binomial", "bernoulli"):
        raise ValueError("trials: only the binomial family has trials")
    p = Xm.shape[1]
    xn = list(x_names) if x_names is not None else (
        ["(Intercept)"] if X is None else [f"x{j}" for j in range(p)])
    if len(xn) != p:
        raise ValueError("x_names: give one name per column of X")
    if k == 1:
        zn_all = [z_names]
    else:
        zn_all = [None] * k if z_names is None else _per_factor("z_names", list(z_names), k)
    zn = []
    for t, (Zt, names_t) in enumerate(zip(Zs, zn_all)):
        q = Zt.shape[1]
        names_t = list(names_t) if names_t is not None else (
            ["(Intercept)"] if q == 1 and np.all(Zt == 1) else [f"z{j}" for j in range(q)])
        if len(names_t) != q:
            raise ValueError("z_names: give one name per column of Z")
        zn.append(names_t)
    show, close = _progress(progress, 50 * (max_msteps or 20), "sagd.glmm")
    try:
        d = _core.fit_glmm(family, yv, Xm, [i.astype(np.int64) for i in index], Zs, cor, tv,
                           int(seed), threads, max_msteps, show)
    finally:
        close()
    one = k == 1
    label = (lambda t, c: c) if one else (lambda t, c: f"{factor_names[t]}: {c}")
    names = list(xn)
    for t, (names_t, c) in enumerate(zip(zn, cor)):
        q = len(names_t)
        names += [f"log sd {label(t, v)}" for v in names_t]
        if c:
            names += [f"L[{a},{b}] {factor_names[t]}" for a in range(1, q) for b in range(a)]
    gaussian = family.lower() in ("gaussian", "normal")
    if gaussian:
        names.append("log(sigma)")
    base = FitResult._of(d, names)
    est = base.estimate
    cov = _inverse(d.get("information"), len(est))

    def delta(fun: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        # Standard errors of fun(theta) from theta's covariance, by central differences.
        f0 = np.atleast_1d(fun(est))
        if cov is None:
            return np.full(f0.shape, np.nan)
        J = np.zeros((f0.size, est.size))
        for j in range(est.size):
            h = 1e-6 * max(1.0, abs(est[j]))
            e = np.zeros(est.size)
            e[j] = h
            J[:, j] = (np.atleast_1d(fun(est + e)) - np.atleast_1d(fun(est - e))) / (2 * h)
        return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", J, cov, J), 0.0))

    sds, sd_ses, cors, rnames = [], [], [], []
    at = p
    for t, (names_t, c) in enumerate(zip(zn, cor)):
        q = len(names_t)
        m = _term_params(q, c)

        def sd_of(th: np.ndarray, at: int = at, q: int = q, c: bool = c, m: int = m) -> np.ndarray:
            L = _cholesky(th[at:at + m], q, c)
            return np.sqrt(np.sum(L * L, axis=1))

        L = _cholesky(est[at:at + m], q, c)
        S = L @ L.T
        s = np.sqrt(np.diag(S))
        sds.append(s)
        sd_ses.append(delta(sd_of))
        cors.append(S / np.outer(s, s))
        rnames += [label(t, v) for v in names_t]
        at += m
    tau = np.concatenate(sds)
    if d.get("singular") or np.any(tau < 1e-4):
        # A variance at the boundary: its log has no finite maximum, and no standard error.
        note = ("singular fit: the likelihood is highest with a random effect's sd at 0 (the "
                "data show no variation between groups beyond the fixed effects), so the sd's "
                "estimate is only near 0 and its standard error is meaningless; drop the random "
                "effect, or report the sd as 0")
        base.warning = note if base.warning is None else f"{note}; {base.warning}"
    return GlmmResult(
        **{f: getattr(base, f) for f in FitResult.__dataclass_fields__},
        family=family.lower(),
        fixed=est[:p].copy(),
        fixed_se=base.se[:p].copy(),
        random_sd=tau,
        random_sd_se=np.concatenate(sd_ses),
        random_names=rnames,
        random_cor=cors,
        sigma=float(np.exp(est[-1])) if gaussian else None,
        sigma_se=float(np.exp(est[-1]) * base.se[-1]) if gaussian else None,
        loglik=d.get("loglik"),
        loglik_se=d.get("loglik_se"),
        loglik_method=d.get("loglik_method"),
        groups=labels[0] if one else dict(zip(factor_names, labels)),
        n_points=int(d.get("n_points", 0)),
    )


def _inverse(information: Any, p: int) -> Optional[np.ndarray]:
    """theta's covariance: the inverse of the observed information (None without a polish)."""
    if information is None:
        return None
    try:
        return np.linalg.inv(np.asarray(information).reshape(p, p))
    except np.linalg.LinAlgError:
        return None


def fit(
    f: Callable[[np.ndarray, np.ndarray, np.ndarray], Tuple[Any, Any, Any]],
    theta0: Any,
    n_points: int,
    latent_dim: int,
    *,
    seed: int = 0,
    threads: Optional[int] = None,
    max_msteps: Optional[int] = None,
    names: Optional[Sequence[str]] = None,
    progress: bool = False,
) -> FitResult:
    """Fits your own latent-variable model p(x, z; theta) by automated Monte Carlo EM.

    Args:
        f: ``f(theta, points, z) -> (logp, grad_z, grad_theta)`` for a block of chains:
            ``theta`` (p,), ``points`` (m,) the data indices of the rows, ``z`` (m, latent_dim)
            their latents. Return ``logp`` (m,) = log p(x_points[r], z[r]; theta),
            ``grad_z`` (m, latent_dim) its gradients in z, and ``grad_theta`` (p,) the SUM over
            the rows of the gradients in theta. Vectorise it: one call serves many chains.
        theta0: where EM starts (p values).
        n_points: the number of data points (each has its own latent).
        latent_dim: the dimension of one point's latent.
        seed, threads, max_msteps: as :func:`glmm`.
        names: the parameters' names for the table.
        progress: show a progress bar of EM's updates.

    Returns:
        A :class:`FitResult`.

    Raises:
        ValueError: bad shapes of the arguments or of what ``f`` returns.
        Whatever ``f`` raises, as itself.
        KeyboardInterrupt: Ctrl-C during the fit.
    """
    if not callable(f):
        raise ValueError("f: give a function f(theta, points, z) -> (logp, grad_z, grad_theta)")
    t0 = _vector("theta0", theta0)
    if int(n_points) < 1 or int(latent_dim) < 1:
        raise ValueError("n_points, latent_dim: both must be at least 1")
    if names is not None and len(names) != t0.shape[0]:
        raise ValueError("names: give one name per parameter")
    show, close = _progress(progress, 50 * (max_msteps or 20), "sagd.fit")
    try:
        d = _core.fit_function(f, t0, int(n_points), int(latent_dim), int(seed), threads,
                               max_msteps, show)
    finally:
        close()
    return FitResult._of(d, names)


@dataclass
class MinimizeResult:
    """What :func:`minimize` did.

    Attributes:
        theta: the last iterate.
        theta_avg: the iterates' average (what Theorem 3 bounds, for convex F).
        path: theta0 and theta after every update (rows).
        grad_norms: the norm of each update's gradient estimate.
        stopped: whether Ctrl-C ended the run early (then a KeyboardInterrupt is raised instead).
    """

    theta: np.ndarray
    theta_avg: np.ndarray
    path: np.ndarray
    grad_norms: np.ndarray
    stopped: bool = False


def minimize(
    f: Callable[[np.ndarray, np.ndarray], Tuple[Any, Any, Any]],
    theta0: Any,
    xi0: Any,
    *,
    iterations: int = 200,
    schedule: str = "theorem3",
    c1: float = 0.1,
    c2: float = 1.0,
    c: float = 0.25,
    alpha0: float = 0.1,
    step_size: Optional[float] = None,
    chain_length: Optional[int] = None,
    learning_rate: Optional[float] = None,
    scheme: str = "baoab",
    gamma: float = 1.0,
    seed: int = 0,
    threads: Optional[int] = None,
    progress: bool = False,
) -> MinimizeResult:
    """Stochastic Approximate Gradient Descent (Algorithm 1): minimises F(theta) = E f(theta; xi)
    with xi ~ pi_theta known up to a constant, each gradient from short Langevin chains.

    Args:
        f: ``f(theta, xi) -> (logp, grad_xi, grad_f)`` for the chains' states ``xi`` (m, d):
            log pi_theta(xi) per row (up to a constant), its gradient in xi (m, d), and the SUM
            over the rows of the gradient of f(theta; xi) in theta (p,).
        theta0: where theta starts (p values).
        xi0: the chains' start, (n_chains, d).
        iterations: updates T.
        schedule: ``"theorem3"`` (convex F: delta_t = c1/sqrt(t), K_t = ceil(c2 t),
            alpha_t = alpha0/sqrt(t)), ``"theorem4"`` (nonconvex: delta_t = c1 t^-c,
            K_t = ceil(c2 t^2c), alpha_t = alpha0/t) or ``"constant"`` (``step_size``,
            ``chain_length``, ``learning_rate``).
        scheme: the Langevin integrator: ``"euler"`` (the paper's), ``"obabo"``, ``"baoab"``,
            ``"ubu"``; ``gamma`` its friction.
        seed, threads, progress: as :func:`glmm`.

    Returns:
        A :class:`MinimizeResult`.
    """
    if not callable(f):
        raise ValueError("f: give a function f(theta, xi) -> (logp, grad_xi, grad_f)")
    t0 = _vector("theta0", theta0)
    x = np.asarray(xi0, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"xi0: expected (n_chains, d), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("xi0: contains values that are not finite")
    if int(iterations) < 1:
        raise ValueError("iterations: at least 1")
    if schedule == "constant":
        if step_size is None or chain_length is None or learning_rate is None:
            raise ValueError("schedule='constant' needs step_size, chain_length and learning_rate")
        sched = ("constant", float(step_size), float(chain_length), 0.0, float(learning_rate))
    else:
        sched = (schedule, float(c1), float(c2), float(c), float(alpha0))
    show, close = _progress(progress, int(iterations), "sagd.minimize")
    try:
        d = _core.minimize(f, t0, np.ascontiguousarray(x).ravel(), x.shape[0], sched,
                           int(iterations), scheme, float(gamma), int(seed), threads, show)
    finally:
        close()
    return MinimizeResult(theta=np.asarray(d["theta"]), theta_avg=np.asarray(d["theta_avg"]),
                          path=np.asarray(d["path"]), grad_norms=np.asarray(d["grad_norms"]),
                          stopped=bool(d["stopped"]))


@dataclass
class Deconvolution:
    """The fitted laws of Z from :func:`deconvolve`.

    Attributes:
        draws: per fitted model (``"pretrained"``, and each method: ``"vae"``, ``"iwae"``,
            ``"hmc"``, ``"sagd"``), sorted draws of Z in the data's units.
        loglik_per_point: per fitted model, the mean log-likelihood per observation of the
            standardised data (higher is better; a tiny difference is not a verdict).
        noise_sd: the noise sd the data were deconvolved with.
    """

    draws: Dict[str, np.ndarray]
    loglik_per_point: Dict[str, Optional[float]]
    noise_sd: float

    def __repr__(self) -> str:
        lines = [f"deconvolution, noise sd {self.noise_sd}:",
                 f"{'model':12} {'mean':>8} {'sd':>8} {'5%':>8} {'50%':>8} {'95%':>8} {'loglik/pt':>10}"]
        for name, v in self.draws.items():
            q = np.quantile(v, [0.05, 0.5, 0.95])
            ll = self.loglik_per_point.get(name)
            lls = "" if ll is None else f"{ll:10.4f}"
            lines.append(f"{name:12} {v.mean():8.3f} {v.std():8.3f} {q[0]:8.3f} {q[1]:8.3f} "
                         f"{q[2]:8.3f} {lls:>10}")
        return "\n".join(lines)


def deconvolve(
    x: Any,
    noise_sd: float,
    *,
    methods: Sequence[str] = ("vae", "iwae", "hmc", "sagd"),
    seed: int = 0,
    threads: Optional[int] = None,
    pretrain_epochs: Optional[int] = None,
    finetune_epochs: Optional[int] = None,
    progress: bool = False,
) -> Deconvolution:
    """Fits the law of Z from observations X = Z + N(0, noise_sd^2): the paper's E2 on your data.

    A VAE with a neural generator Z = g(U), U ~ N(0, 1), is pre-trained on (X - median)/noise_sd,
    then fine-tuned by each method (``"vae"``: its ELBO; ``"iwae"``; ``"hmc"``; ``"sagd"``: the
    debiased gradient of the paper); the draws of Z come back in the data's units. Settings are
    the paper's (5000 pre-training and 1000 fine-tuning full-batch epochs, unless given).

    Raises:
        ValueError: fewer than 2 observations, values that are not finite, a noise sd that is not
            a positive number, an unknown method.
    """
    xv = _vector("x", x)
    if not (isinstance(noise_sd, (int, float)) and math.isfinite(noise_sd) and noise_sd > 0):
        raise ValueError(f"noise_sd: {noise_sd!r}; give the noise's standard deviation, > 0")
    show, close = _progress(progress, None, "sagd.deconvolve")
    try:
        d = _core.deconvolve(xv, float(noise_sd), list(methods), int(seed), threads,
                             pretrain_epochs, finetune_epochs, show)
    finally:
        close()
    return Deconvolution(draws={k: np.asarray(v) for k, v in d["draws"].items()},
                         loglik_per_point=dict(d["loglik_per_point"]),
                         noise_sd=float(d["noise_sd"]))
