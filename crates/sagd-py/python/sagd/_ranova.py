"""Models with one term less, each tested against the fit by the likelihood ratio: lmerTest's
``ranova(fit)`` (each random effect left out) and lme4's ``drop1(fit, test = "Chisq")`` (each
fixed-effect term that no other contains left out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _core
from ._anova import chi2_upper_tail
from ._common import Column, _text_table
from ._glmm import GlmmResult


@dataclass
class RanovaResult:
    """The model, then each random effect left out, as lmerTest's ``ranova`` tabulates them.

    Attributes:
        names: ``"<none>"`` (the model), then each reduced model's name as lmerTest prints it
            (``"(1 | g)"``: that term left out; ``"x in (1 + x | g)"``: x left out of it).
        n_params: each model's parameters (lmerTest's ``npar``).
        loglik: each model's maximised criterion: REML's for a REML fit, else the
            log-likelihood; ``aic`` = -2 loglik + 2 npar.
        lrt: twice the model's criterion less the reduced model's (None for the model);
            ``df`` the parameters dropped; ``p_value`` the chi-square law's upper tail (a
            variance tested at 0 sits on its boundary, where it is conservative).
        reml: whether the criterion is REML's.
    """

    names: List[str] = field(default_factory=list)
    n_params: List[int] = field(default_factory=list)
    loglik: List[float] = field(default_factory=list)
    aic: List[float] = field(default_factory=list)
    lrt: List[Optional[float]] = field(default_factory=list)
    df: List[Optional[int]] = field(default_factory=list)
    p_value: List[Optional[float]] = field(default_factory=list)
    reml: bool = False

    def __repr__(self) -> str:
        return "\n".join(_text_table(self.names, self._columns()))

    def _columns(self) -> List[Column]:
        """lmerTest's columns of the table (the tests blank on the model's row)."""
        return [("npar", 5, str, self.n_params), ("logLik", 11, "{:.4f}".format, self.loglik),
                ("AIC", 10, "{:.4f}".format, self.aic), ("LRT", 9, "{:.4f}".format, self.lrt),
                ("Df", 3, str, self.df), ("Pr(>Chisq)", 11, "{:.4g}".format, self.p_value)]

    def to_pandas(self):
        """The table as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame({"npar": self.n_params, "logLik": self.loglik, "AIC": self.aic,
                             "LRT": self.lrt, "Df": self.df, "Pr(>Chisq)": self.p_value},
                            index=self.names)


@dataclass(repr=False)
class Drop1Result(RanovaResult):
    """The model, then each fixed-effect term left out, as lme4's ``drop1(fit, test =
    "Chisq")`` tabulates them (with the columns of :class:`RanovaResult`; lme4's ``npar`` is
    ``df`` here).

    Attributes:
        names: ``"<none>"`` (the model), then each term left out as formulaic writes it.
        loglik_se: each log-likelihood's Monte Carlo error (0 where exact).
        refitted_by_ml: whether the fit, by REML, was refitted by maximum likelihood first (as
            lme4's ``drop1`` refits it); every model's criterion is then the likelihood.
    """

    loglik_se: List[float] = field(default_factory=list)
    refitted_by_ml: bool = False

    def __repr__(self) -> str:
        head = ["Single term deletions (lme4's drop1, test = \"Chisq\""
                + ("; the models refitted by ML instead of REML)" if self.refitted_by_ml else ")")]
        return "\n".join(head + [RanovaResult.__repr__(self)])


def marginal_terms(spec: Any) -> List[Tuple[str, List[int]]]:
    """The fixed-effect terms of a formula's ``spec`` that no other term contains (R's
    ``drop.scope``), each with its columns of the design, in the formula's order."""
    terms = [(str(t), {f.expr for f in t.factors}, list(range(sl.start, sl.stop)))
             for t, sl in spec.fixed.term_slices.items() if str(t) != "1"]
    return [(name, cols) for name, vs, cols in terms
            if not any(vs < other for _, other, _ in terms)]


def drop1(fit: GlmmResult) -> Drop1Result:
    """lme4's ``drop1(fit, test = "Chisq")``: each fixed-effect term of a fit made by
    :func:`glmm` from a formula that no other term contains (R's ``drop.scope``: ``x`` stays
    while ``x:A`` is in the model) tested by the likelihood ratio of the model refitted without
    it, by maximum likelihood (a REML fit is refitted by ML first, as lme4 refits it), under the
    fit's method, nodes and M-steps. The same terms and tests as ``sagd glmm --drop1``; any
    family.

    Returns:
        A :class:`Drop1Result` (``print`` it for the table).

    Raises:
        ValueError: a fit not made by :func:`glmm` from a formula here, or a model with no
            fixed-effect term to leave out.
    """
    if not isinstance(fit, GlmmResult) or fit._model is None or fit._spec is None:
        raise ValueError("drop1: give a fit made by sagd.glmm from a formula here: its terms' "
                         "columns are what is left out")
    s = fit._model
    core = s["core"]
    scope = marginal_terms(fit._spec)
    if not scope:
        raise ValueError("drop1: the model has no fixed-effect term to leave out (its "
                         "intercept stays, as lme4's drop1 keeps it)")

    def ml_fit(c: Dict[str, Any], names: List[str]) -> Tuple[float, float, int]:
        d = _core.fit_glmm(**c, x_names=names, terms=s["terms"], method=s["method"],
                           reml=False, nodes=s["nodes"], max_msteps=s["max_msteps"],
                           ranef_draws=0)
        se = float(d.get("loglik_se") or 0.0) if d["status"] != "exact" else 0.0
        return float(d["loglik"]), se, len(d["estimate"])

    full = ml_fit(core, s["x_names"]) if fit.reml else (
        float(fit.loglik), 0.0 if fit.method == "exact" else float(fit.loglik_se or 0.0),
        len(fit.estimate))
    out = Drop1Result(refitted_by_ml=bool(fit.reml))
    rows = [("<none>", full, None)]
    for name, cols in scope:
        x = np.ascontiguousarray(np.delete(core["x"], cols, axis=1))
        names = [n for j, n in enumerate(s["x_names"]) if j not in cols]
        reduced = ml_fit(dict(core, x=x), names)
        rows.append((name, reduced, 2.0 * (full[0] - reduced[0])))
    for name, (ll, se, npar), lrt in rows:
        out.names.append(name)
        out.n_params.append(npar)
        out.loglik.append(ll)
        out.loglik_se.append(se)
        out.aic.append(-2.0 * ll + 2.0 * npar)
        out.lrt.append(lrt)
        out.df.append(None if lrt is None else full[2] - npar)
        out.p_value.append(None if lrt is None else chi2_upper_tail(max(lrt, 0.0), full[2] - npar))
    return out


def ranova(fit: GlmmResult) -> RanovaResult:
    """lmerTest's ``ranova(fit)``: each random effect of a Gaussian fit made by
    :func:`glmm` tested by the likelihood ratio of the model refitted without it, under the
    fit's own criterion (REML's for ``reml=True``). A correlated term loses each effect but its
    intercept (``x in (1 + x | g)``: the model with ``(1 | g)``), a term of one effect goes
    whole, and independent effects (``(1 + x || g)``, lme4's ``(1 | g) + (0 + x | g)``) each go
    whole; where no random term is left, the fixed effects alone are fitted by least squares
    (R's ``logLik(lm(...), REML = ...)``). The same reductions and tests as ``sagd glmm
    --ranova``.

    Returns:
        A :class:`RanovaResult` (``print`` it for lmerTest's table).

    Raises:
        ValueError: a fit not made by :func:`glmm` here, another family, or a fit by EM.
    """
    return ranova_with_reductions(fit)[0]


def ranova_with_reductions(fit: GlmmResult) -> Tuple[RanovaResult, List[Tuple[int, int]]]:
    """:func:`ranova`'s table, and for each of its rows but the first the reduction it tests:
    the random term and which of its effects (:func:`effects_of`) was left out."""
    if not isinstance(fit, GlmmResult) or fit._model is None or "terms" not in fit._model:
        raise ValueError("ranova: give a fit made by sagd.glmm here: its model's arrays are "
                         "what is refitted")
    if fit.family != "gaussian":
        raise ValueError(f"ranova: lmerTest's ranova tests a Gaussian model's random effects; "
                         f"compare {fit.family} fits with sagd.anova")
    if fit.method != "exact":
        raise ValueError("ranova: the tests need the exact likelihood; refit without "
                         "method='em'")
    s = fit._model
    core, terms = s["core"], s["terms"]
    full = fit.reml_loglik if fit.reml else fit.loglik
    out = RanovaResult(reml=bool(fit.reml))
    k_full = len(fit.estimate)
    out_rows = [("<none>", k_full, float(full), None)]
    effects = effects_of(fit)
    reductions = []
    specs = [(str(g), [e for e, _ in effects[t]], bool(core["correlated"][t]))
             for t, (g, _) in enumerate(terms)]
    for name, t, k in _core.random_reductions(terms=specs):
        reductions.append((int(t), int(k)))
        reduced = _without(core, terms, t, effects[t][k][1])
        if reduced is None:
            ll, npar = _core.least_squares_loglik(y=core["y"], x=core["x"],
                                                  offset=core["offset"],
                                                  weights=core["weights"], reml=bool(fit.reml))
        else:
            c, tm = reduced
            d = _core.fit_glmm(**c, x_names=s["x_names"], terms=tm, method=s["method"],
                               reml=bool(fit.reml), nodes=s["nodes"],
                               max_msteps=s["max_msteps"], ranef_draws=0)
            ll, npar = (d.get("reml_loglik") if fit.reml else d.get("loglik")), len(d["estimate"])
        lrt = 2.0 * (float(full) - float(ll))
        out_rows.append((name, int(npar), float(ll), (lrt, k_full - int(npar))))
    for name, npar, ll, test in out_rows:
        out.names.append(name)
        out.n_params.append(npar)
        out.loglik.append(ll)
        out.aic.append(-2.0 * ll + 2.0 * npar)
        out.lrt.append(None if test is None else test[0])
        out.df.append(None if test is None else test[1])
        out.p_value.append(None if test is None else chi2_upper_tail(max(test[0], 0.0), test[1]))
    return out, reductions


def effects_of(fit: GlmmResult) -> List[List[Tuple[str, range]]]:
    """Per random term, its effects as lme4 writes them (``1`` for the intercept) and the
    columns of its Z each takes: a formula's terms (a categorical variable's columns together),
    else each column of Z alone."""
    terms = fit._model["terms"]
    if fit._spec is not None and len(fit._spec.terms) == len(terms):
        return [[(str(term), range(sl.start, sl.stop)) for term, sl in spec.term_slices.items()]
                for spec in fit._spec.terms]
    return [[("1" if e == "(Intercept)" else str(e), range(j, j + 1)) for j, e in enumerate(names)]
            for _, names in terms]


def _without(core: Dict[str, Any], terms: List[Tuple[str, List[str]]], t: int,
             cols: range) -> Optional[Tuple[Dict[str, Any], List[Tuple[str, List[str]]]]]:
    """The model's arrays and terms with the columns ``cols`` of term ``t``'s Z left out (the
    term too where they were all of it); None where no random term is left."""
    groups, zs, cor = list(core["groups"]), list(core["zs"]), list(core["correlated"])
    tm = [(g, list(e)) for g, e in terms]
    if zs[t].shape[1] > len(cols):
        zs[t] = np.ascontiguousarray(np.delete(zs[t], list(cols), axis=1))
        tm[t] = (tm[t][0], [e for j, e in enumerate(tm[t][1]) if j not in cols])
    else:
        del groups[t], zs[t], cor[t], tm[t]
    if not groups:
        return None
    return dict(core, groups=groups, zs=zs, correlated=cor), tm
