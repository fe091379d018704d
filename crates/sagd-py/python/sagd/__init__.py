"""sagd: maximum likelihood for latent-variable models by automated Monte Carlo EM.

Each M-step of EM is a run of Stochastic Approximate Gradient Descent (Qiu and Wang, AAAI 2020):
gradients from short underdamped Langevin chains on every data point's posterior, Newton steps,
and a final polish that brings the estimate to the maximum of the log-likelihood with standard
errors (each with its own Monte Carlo error).

Four entry points:

* :func:`glmm` fits a generalised linear mixed model (Gaussian, Poisson, binomial) from numpy
  arrays, with every gradient computed in Rust: by its exact likelihood where that can be
  computed to rounding (as lme4), by Langevin chains otherwise (the polish's Newton steps from
  Laplace's maximum, automated EM where they fail);
  :func:`glmm_loglik` evaluates that likelihood at any estimate, :func:`anova` compares
  nested fits by likelihood-ratio tests, and :func:`ranova` tests each random effect of a
  Gaussian fit (lmerTest's ``ranova``); ``glmm(..., ddf=...)`` gives lmerTest's t and type III
  F tests with Satterthwaite's or Kenward and Roger's degrees of freedom, and
  ``glmm(..., ls_means=...)`` lmerTest's least-squares means.
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
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._common import FitResult, _progress, _threads, _vector, _whole
from ._anova import AnovaResult, anova
from ._ls_means import LsMeansResult
from ._ranova import Drop1Result, RanovaResult, drop1, ranova
from ._step import StepFixedTable, StepRandomTable, StepResult, step
from ._glmm import GlmmResult, glmm, glmm_loglik

__version__ = _core.__version__

__all__ = ["glmm", "glmm_loglik", "anova", "AnovaResult", "ranova", "RanovaResult", "drop1", "Drop1Result", "step", "StepResult", "StepRandomTable", "StepFixedTable", "LsMeansResult", "fit", "minimize", "deconvolve", "GlmmResult", "FitResult", "MinimizeResult",
           "Deconvolution", "__version__"]


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
        KeyboardInterrupt: Ctrl-C during the fit (``f`` is not called again; a second Ctrl-C
            interrupts the calls of ``f`` in progress).
    """
    if not callable(f):
        raise ValueError("f: give a function f(theta, points, z) -> (logp, grad_z, grad_theta)")
    t0 = _vector("theta0", theta0)
    n_points, latent_dim = _whole("n_points", n_points, 1), _whole("latent_dim", latent_dim, 1)
    if names is not None and len(names) != t0.shape[0]:
        raise ValueError("names: give one name per parameter")
    show, close = _progress(progress, 50 * (max_msteps or 20), "sagd.fit")
    try:
        d = _core.fit_function(f=f, theta0=t0, n_points=n_points, latent_dim=latent_dim,
                               seed=_whole("seed", seed), threads=_threads(threads),
                               max_msteps=(None if max_msteps is None
                                           else _whole("max_msteps", max_msteps, 1)),
                               progress=show)
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
    iterations = _whole("iterations", iterations, 1)
    if chain_length is not None:
        chain_length = _whole("chain_length", chain_length, 1)
    number = lambda v: None if v is None else float(v)
    show, close = _progress(progress, int(iterations), "sagd.minimize")
    try:
        d = _core.minimize(f=f, theta0=t0, xi0=np.ascontiguousarray(x).ravel(),
                           n_chains=x.shape[0], iterations=iterations, schedule=str(schedule),
                           c1=float(c1), c2=float(c2), c=float(c), alpha0=float(alpha0),
                           step_size=number(step_size), chain_length=chain_length,
                           learning_rate=number(learning_rate), scheme=scheme,
                           gamma=float(gamma), seed=_whole("seed", seed),
                           threads=_threads(threads), progress=show)
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
            standardised training data (in-sample: not a verdict between models).
        noise_sd: the noise sd the data were deconvolved with.
        held_out: the models compared on the held-out observations (None with ``holdout=0``):
            ``n``, ``scores`` (per model: ``mean`` and ``se`` of the held-out log-likelihood per
            observation, ``below_best`` and its paired ``below_best_se``), ``best``,
            ``confidence`` (``"clear"``, ``"likely"`` or ``"undecided"``), ``chosen`` (the model
            the data choose, None when undecided; ``best`` is only the highest) and ``advice``.
    """

    draws: Dict[str, np.ndarray]
    loglik_per_point: Dict[str, Optional[float]]
    noise_sd: float
    held_out: Optional[Dict[str, Any]] = None

    @property
    def recommendation(self) -> Optional[str]:
        """The advice of the held-out comparison (None when nothing was held out)."""
        return None if self.held_out is None else self.held_out["advice"]

    def held_out_table(self):
        """The held-out comparison as a pandas DataFrame, best model first (needs pandas)."""
        import pandas as pd

        if self.held_out is None:
            raise ValueError("held_out: nothing was held out (holdout=0)")
        return pd.DataFrame(self.held_out["scores"]).set_index("model")

    def __repr__(self) -> str:
        lines = [f"deconvolution, noise sd {self.noise_sd}:",
                 f"{'model':12} {'mean':>8} {'sd':>8} {'5%':>8} {'50%':>8} {'95%':>8} {'loglik/pt':>10}"]
        # Z to a thousandth of the noise's sd, in any units (3 decimals at sd 1), as the CLI.
        dec = int(min(20, max(0, 3 - math.floor(math.log10(self.noise_sd)))))
        for name, v in self.draws.items():
            q = np.quantile(v, [0.05, 0.5, 0.95])
            ll = self.loglik_per_point.get(name)
            lls = "" if ll is None else f"{ll:10.4f}"
            z = " ".join(f"{t:8.{dec}f}" for t in (v.mean(), v.std(), q[0], q[1], q[2]))
            lines.append(f"{name:12} {z} {lls:>10}")
        if self.held_out is not None:
            h = self.held_out
            lines.append(f"held-out log-likelihood per observation ({h['n']} observations):")
            for m in h["scores"]:
                below = ("" if m["model"] == h["best"] else
                         f"{m['below_best']:.4f} below the highest (paired se "
                         f"{m['below_best_se']:.4f})")
                # Without a choice, the rows the data cannot tell from the highest are tied.
                tied = (h.get("chosen") is None
                        and m["below_best"] <= 2.0 * m["below_best_se"])
                mark = "  tied" if tied else ""
                lines.append(f"{m['model']:12} {m['mean']:8.4f} ± {m['se']:.4f}  {below}{mark}")
            lines.append(f"recommendation ({h['confidence']}): {h['advice']}")
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
    holdout: float = 0.2,
    progress: bool = False,
    preset: str = "default",
    device: str = "cpu",
) -> Deconvolution:
    """Fits the law of Z from observations X = Z + N(0, noise_sd^2): the paper's E2 on your data.

    A VAE with a neural generator Z = g(U), U ~ N(0, 1), is pre-trained on (X - median)/noise_sd,
    then fine-tuned by each method (``"vae"``: its ELBO; ``"iwae"``; ``"hmc"``; ``"sagd"``: the
    debiased gradient of the paper); the draws of Z come back in the data's units. Settings are
    the paper's (5000 pre-training and 1000 fine-tuning full-batch epochs, unless given). A
    fraction ``holdout`` of the observations (drawn from ``seed``; 0: none) is left out of the
    fit and scores the fitted models: ``held_out`` and ``recommendation`` say which predicts
    them best, and how sure that is. ``preset`` names SAGD's settings, as ``sagd debias
    --sagd-preset`` does: ``"default"`` (the paper's chains), ``"theorem3"``, ``"decay"``,
    ``"refresh"`` (chains restarted from the encoder every 20 updates) or ``"refresh2"``
    (refresh with two chains per point); ``docs/results/table1.md`` compares them. ``device``
    is where the networks train: ``"cpu"``, or ``"cuda"`` (``"cuda:N"``) for an NVIDIA GPU, with
    CUDA 13's libraries loaded when asked (the evaluation stays on the CPU).

    Raises:
        ValueError: fewer than 2 observations, values that are not finite, a noise sd that is not
            a positive number, an unknown method, preset or device, a holdout outside [0, 0.5].
        RuntimeError: ``device="cuda"`` where no GPU or CUDA library can be opened (the message
            says which).
    """
    xv = _vector("x", x)
    # numpy's scalars (float32 included) are numbers too; bool is not.
    number = isinstance(noise_sd, (int, float, np.integer, np.floating)) and not isinstance(
        noise_sd, (bool, np.bool_))
    if not (number and math.isfinite(noise_sd) and noise_sd > 0):
        raise ValueError(f"noise_sd: {noise_sd!r}; give the noise's standard deviation, a finite "
                         "number > 0")
    show, close = _progress(progress, None, "sagd.deconvolve")
    try:
        d = _core.deconvolve(x=xv, noise_sd=float(noise_sd), holdout=float(holdout),
                             methods=list(methods), seed=_whole("seed", seed),
                             threads=_threads(threads), pretrain_epochs=pretrain_epochs,
                             finetune_epochs=finetune_epochs, progress=show, preset=str(preset),
                             device=str(device))
    finally:
        close()
    return Deconvolution(draws={k: np.asarray(v) for k, v in d["draws"].items()},
                         loglik_per_point=dict(d["loglik_per_point"]),
                         noise_sd=float(d["noise_sd"]), held_out=d.get("held_out"))
