"""`GlmmResult.predict`: a fitted GLMM on new rows, lme4's ``predict(fit, newdata,
allow.new.levels = TRUE)``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._common import _matrix, _vector
from ._arrays import _per_factor


def predict(r: Any, newdata: Any = None, *, X: Any = None, groups: Any = None, Z: Any = None,
            offset: Any = None, conditional: bool = True, type: str = "link") -> np.ndarray:
    """See :meth:`sagd.GlmmResult.predict`."""
    if type not in ("link", "response"):
        raise ValueError(f"type: {type!r}: give 'link' (eta) or 'response' (the mean)")
    if r.ranef is None:
        raise ValueError(f"no predictions: the fit has no random effects' modes ({r.warning})")
    names = list(r.groups) if isinstance(r.groups, dict) else ["groups"]
    levels = list(r.groups.values()) if isinstance(r.groups, dict) else [r.groups]
    modes = list(r.ranef.values()) if isinstance(r.ranef, dict) else [r.ranef]
    spec = r._spec
    if newdata is None and X is None and groups is None:
        if not conditional or offset is not None or Z is not None:
            raise ValueError("newdata: give the rows to predict (newdata=df, or X and groups); "
                             "without them predict gives the fit's own eta, with every level")
        return np.array(r.eta if type == "link" else r.fitted, dtype=float)
    if spec is not None:
        if any(v is not None for v in (X, groups, Z, offset)):
            raise ValueError("with a formula fit, give the new rows as newdata=df alone (no X, "
                             "groups, Z or offset)")
        from ._formula import new_rows

        Xn, labels, Zs, off, rows = new_rows(spec, newdata)
        n = len(newdata)
    else:
        if newdata is not None:
            raise ValueError("newdata: only for a fit made with a formula; give X, groups "
                             "(and Z, offset) as the fit was given them")
        if groups is None:
            raise ValueError("groups: give each new row's group (a label the fit has not seen "
                             "gets no effect)")
        labels = [np.asarray(g) for g in (
            [groups[k] for k in names] if isinstance(groups, dict) else
            list(groups) if len(names) > 1 else [groups])]
        n = labels[0].shape[0]
        if any(g.ndim != 1 or g.shape[0] != n for g in labels):
            raise ValueError(f"groups: give one label per new row for each of {names}")
        p = len(r.fixed)
        Xn = np.ones((n, 1)) if X is None and p == 1 else _matrix("X", X, n, least=0)
        Zs = []
        per_factor = ([Z.get(n) for n in names] if isinstance(Z, dict)
                      else _per_factor("Z", Z, len(names)))
        for name, z, b in zip(names, per_factor, modes):
            if z is None and b.shape[1] > 1:
                raise ValueError(f"Z: {name}'s {b.shape[1]} effects need their design for the "
                                 "new rows")
            Zs.append(np.ones((n, 1)) if z is None else _matrix("Z", z, n))
        off = None if offset is None else _vector("offset", offset, n)
        rows = np.arange(n)
    if Xn.shape[1] != len(r.fixed):
        raise ValueError(f"X: {Xn.shape[1]} columns for the fit's {len(r.fixed)} fixed effects")
    eta = Xn @ np.asarray(r.fixed, dtype=float)
    if off is not None:
        eta = eta + off
    if conditional:
        for name, lab, z, known, b in zip(names, labels, Zs, levels, modes):
            b = np.asarray(b, dtype=float)
            if z.shape[1] != b.shape[1]:
                raise ValueError(f"Z: {z.shape[1]} columns for {name}'s {b.shape[1]} effects")
            at = {v: k for k, v in enumerate(np.asarray(known).tolist())}
            index = np.array([at.get(v, -1) for v in np.asarray(lab).tolist()], dtype=int)
            seen = index >= 0
            eta[seen] += np.sum(z[seen] * b[index[seen]], axis=1)
    out = np.full(n, np.nan)
    out[rows] = _scale(r.family, eta, type)
    return out


def _scale(family: str, eta: np.ndarray, type: str) -> np.ndarray:
    """eta, or the mean: exp for the Poisson family, the logistic for the binomial."""
    if type == "link" or family == "gaussian":
        return eta
    if family == "poisson":
        return np.exp(eta)
    return 1.0 / (1.0 + np.exp(-eta))
