"""The arguments of ``sagd.glmm`` and ``sagd.glmm_loglik`` checked and turned into the core's
arrays: the grouping factors numbered, one design per factor, the flags per factor."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._common import _matrix, _vector


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


@dataclass
class _Arrays:
    """`sagd.glmm`'s data, checked and in the core's form."""

    family: str
    y: np.ndarray
    n: int
    factor_names: List[str]
    k: int
    labels: Tuple[np.ndarray, ...]
    index: Tuple[np.ndarray, ...]
    X: np.ndarray
    Zs: List[np.ndarray]
    cor: List[bool]
    trials: Optional[np.ndarray]
    offset: Optional[np.ndarray] = None
    weights: Optional[np.ndarray] = None

    @classmethod
    def of(cls, y: Any, X: Any, groups: Any, family: str, Z: Any, trials: Any,
           correlated: Any, offset: Any = None, weights: Any = None) -> "_Arrays":
        yv = _vector("y", y)
        n = yv.shape[0]
        if n == 0:
            raise ValueError("y: empty; give at least one observation")
        if groups is None:
            raise ValueError("groups: give the group of each observation")
        factor_names, factors = _factors(groups, n)
        k = len(factors)
        for name, g in zip(factor_names, factors):
            if g.dtype.kind == "f":
                missing = np.flatnonzero(np.isnan(g))
            elif g.dtype.kind == "O":
                missing = np.flatnonzero([v is None or (isinstance(v, (float, np.floating))
                                                        and math.isnan(v)) for v in g])
            else:
                missing = np.zeros(0, dtype=int)
            if missing.size:
                raise ValueError(f"groups: a missing label (NaN or None) at observation "
                                 f"{int(missing[0])} of {name}; drop those observations or give "
                                 f"them a group")
        try:
            labels, index = zip(*(np.unique(g, return_inverse=True) for g in factors))
        except TypeError:
            raise ValueError("groups: labels of mixed types (numbers and text) in one grouping "
                             "factor; give each factor labels of one type, e.g. all text") from None
        # No columns: a model without fixed effects, lme4's y ~ 0 + (1 | g).
        Xm = np.ones((n, 1)) if X is None else _matrix("X", X, n, least=0)
        Zs = [np.ones((n, 1)) if z is None else _matrix("Z", z, n)
              for z in _per_factor("Z", Z, k)]
        cor = [bool(c) and Zt.shape[1] > 1
               for c, Zt in zip(_per_factor("correlated", correlated, k), Zs)]
        tv = None if trials is None else _vector("trials", trials, n)
        if tv is not None and family.lower() not in ("binomial", "bernoulli"):
            raise ValueError("trials: only the binomial family has trials")
        ov = None if offset is None else _vector("offset", offset, n)
        wv = None if weights is None else _vector("weights", weights, n)
        if wv is not None and family.lower() not in ("gaussian", "normal", "binomial",
                                                     "bernoulli"):
            raise ValueError("weights: prior weights are the Gaussian family's and the "
                             "binomial's (its trials); give a Poisson's exposure as an offset")
        return cls(family, yv, n, factor_names, k, labels, index, Xm, Zs, cor, tv, ov, wv)

    def core(self) -> Dict[str, Any]:
        """The model's arguments of ``_core.fit_glmm`` and ``_core.glmm_loglik``, by name."""
        return dict(family=self.family, y=self.y, x=self.X,
                    groups=[i.astype(np.int64) for i in self.index], zs=self.Zs,
                    correlated=self.cor, trials=self.trials, offset=self.offset,
                    weights=self.weights)
