"""lmerTest's ``step(fit)``: a Gaussian fit's terms eliminated backward, the random effects by
their likelihood-ratio tests (:func:`sagd.ranova`'s), then the fixed-effect terms that no other
contains by their F tests; the same elimination as ``sagd glmm --step``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Tuple

from ._common import Column, _text_table
from ._glmm import GlmmResult, glmm
from ._ranova import RanovaResult, effects_of, marginal_terms, ranova_with_reductions

_DDF = ("satterthwaite", "kenward-roger")


@dataclass(repr=False)
class StepRandomTable(RanovaResult):
    """lmerTest's backward reduced random-effect table: the model as given (``"<none>"``), each
    random effect left out with its test in the round that left it out, then the tests of the
    random effects of the model found (the columns of :class:`RanovaResult`).

    Attributes:
        eliminated: per row, the round that left it out, 0 for those kept (None for the first).
    """

    eliminated: List[Optional[int]] = field(default_factory=list)

    def _columns(self) -> List[Column]:
        return [("Eliminated", 10, str, self.eliminated)] + RanovaResult._columns(self)


@dataclass
class StepFixedTable:
    """lmerTest's backward reduced fixed-effect table: each term left out, with its F test in
    the round that left it out, then the F tests of the model found's terms that no other
    contains.

    Attributes:
        names: the terms as formulaic writes them; ``eliminated`` the round that left each out
            (0: kept).
        sum_sq, mean_sq, num_df, den_df, f_value, p_value: each term's F test (its type III
            hypothesis: its coefficients are 0), by ``ddf``'s degrees of freedom.
    """

    names: List[str] = field(default_factory=list)
    eliminated: List[int] = field(default_factory=list)
    sum_sq: List[float] = field(default_factory=list)
    mean_sq: List[float] = field(default_factory=list)
    num_df: List[int] = field(default_factory=list)
    den_df: List[float] = field(default_factory=list)
    f_value: List[float] = field(default_factory=list)
    p_value: List[float] = field(default_factory=list)

    def add(self, name: str, eliminated: int, test: Tuple[float, float, int, float, float, float]
            ) -> None:
        """Appends a term's row from a fit's type III table entry (Sum Sq, Mean Sq, NumDF,
        DenDF, F, p)."""
        self.names.append(name)
        self.eliminated.append(eliminated)
        for column, v in zip((self.sum_sq, self.mean_sq, self.num_df, self.den_df,
                              self.f_value, self.p_value), test):
            column.append(v)

    def __repr__(self) -> str:
        f4 = "{:.4f}".format
        return "\n".join(_text_table(self.names, [
            ("Eliminated", 10, str, self.eliminated), ("Sum Sq", 10, f4, self.sum_sq),
            ("Mean Sq", 10, f4, self.mean_sq), ("NumDF", 5, str, self.num_df),
            ("DenDF", 9, "{:.2f}".format, self.den_df), ("F value", 9, f4, self.f_value),
            ("Pr(>F)", 10, "{:.4g}".format, self.p_value)]))

    def to_pandas(self):
        """The table as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame({"Eliminated": self.eliminated, "Sum Sq": self.sum_sq,
                             "Mean Sq": self.mean_sq, "NumDF": self.num_df,
                             "DenDF": self.den_df, "F value": self.f_value,
                             "Pr(>F)": self.p_value}, index=self.names)


@dataclass
class StepResult:
    """lmerTest's ``step(fit)``: both tables and the model found.

    Attributes:
        random: the random effects' table (:class:`StepRandomTable`).
        fixed: the fixed-effect terms' table (:class:`StepFixedTable`).
        model_found: the model found, as a formula :func:`glmm` reads.
        fit: the model found, fitted (lmerTest's ``get_model(step(fit))``).
        ddf: the F tests' degrees of freedom, ``"satterthwaite"`` or ``"kenward-roger"``.
        note: why the elimination stopped short of lmerTest's, where it did (lmerTest leaves
            out the last random term and goes on with a linear model; sagd keeps it).
    """

    random: StepRandomTable
    fixed: StepFixedTable
    model_found: str
    fit: GlmmResult
    ddf: str
    note: Optional[str] = None

    def __repr__(self) -> str:
        method = "Kenward-Roger's" if self.ddf == "kenward-roger" else "Satterthwaite's"
        parts = ["Backward reduced random-effect table:", repr(self.random), "",
                 f"Backward reduced fixed-effect table ({method} degrees of freedom):",
                 repr(self.fixed), "", "Model found:", self.model_found]
        return "\n".join(parts + ([f"note: {self.note}"] if self.note else []))


def step(fit: GlmmResult, ddf: str = "satterthwaite", alpha_random: float = 0.1,
         alpha_fixed: float = 0.05) -> StepResult:
    """lmerTest's ``step(fit)``: backward elimination of a Gaussian fit made by :func:`glmm`
    from a formula. First the random effects: each round the reduction of :func:`ranova` whose
    p-value is the largest above ``alpha_random`` is left out and the model refitted (on the
    fit's data, weights, offset and criterion), until none is above it. Then the fixed-effect
    terms that no other contains, by their F tests (Satterthwaite's degrees of freedom, or
    Kenward and Roger's with ``ddf="kenward-roger"``): each round the largest p above
    ``alpha_fixed``. The same elimination and tables as ``sagd glmm --step``. Where the last
    random term's p is above ``alpha_random``, sagd keeps it and says so in ``note`` (lmerTest
    would go on with a linear model).

    Returns:
        A :class:`StepResult` (``print`` it for lmerTest's tables; ``.fit`` the model found).

    Raises:
        ValueError: a fit not made by :func:`glmm` from a formula with ``data=``, another family,
            a fit by EM, an unknown ``ddf`` or an ``alpha`` outside (0, 1].
    """
    if (not isinstance(fit, GlmmResult) or fit._model is None
            or fit._model.get("source") is None or fit._spec is None):
        raise ValueError("step: give a fit made by sagd.glmm from a formula with data=: the "
                         "model found is refitted from its formula")
    if fit.family != "gaussian" or fit.method != "exact":
        raise ValueError("step: lmerTest's step reduces an exact Gaussian fit; compare other "
                         "fits' terms with sagd.drop1 and sagd.anova")
    if ddf not in _DDF:
        raise ValueError(f"step: ddf={ddf!r}; use one of {list(_DDF)}")
    for name, a in (("alpha_random", alpha_random), ("alpha_fixed", alpha_fixed)):
        if not 0.0 < float(a) <= 1.0:
            raise ValueError(f"step: {name}={a}; give a level in (0, 1], e.g. 0.1")
    random, current, note = _eliminate_random(fit, float(alpha_random))
    current = _refit(fit, current.formula, ddf)
    fixed, current = _eliminate_fixed(fit, current, ddf, float(alpha_fixed))
    return StepResult(random=random, fixed=fixed, model_found=str(_formula(current)), fit=current,
                      ddf=ddf, note=note)


def _worst(ps: Iterable[Tuple[int, Optional[float]]], alpha: float) -> Optional[int]:
    """The index of the largest p-value above ``alpha`` (the first among equals)."""
    best: Optional[Tuple[int, float]] = None
    for k, p in ps:
        if p is not None and p > alpha and (best is None or p > best[1]):
            best = (k, p)
    return None if best is None else best[0]


def _eliminate_random(fit: GlmmResult, alpha: float
                      ) -> Tuple[StepRandomTable, GlmmResult, Optional[str]]:
    """The random effects' rounds from ``fit``: the table, the model they leave, and the note
    where the last random term was kept."""
    out, current, note = StepRandomTable(reml=bool(fit.reml)), fit, None
    table, reductions = ranova_with_reductions(current)
    _add_row(out, table, 0, None)
    while True:
        k = _worst(enumerate(table.p_value[1:], start=1), alpha)
        reduced = None if k is None else _formula(current, random_left_out=reductions[k - 1])
        if k is not None and reduced is None:
            note = (f"{table.names[k]} has p above {alpha} but is the last random term: "
                    f"lmerTest's step would leave it out and reduce a linear model's fixed "
                    f"effects; sagd fits mixed models and keeps it")
        if reduced is None:
            for j in range(1, len(table.names)):
                _add_row(out, table, j, 0)
            return out, current, note
        _add_row(out, table, k, sum(1 for v in out.eliminated if v) + 1)
        current = _refit(fit, reduced, None)
        table, reductions = ranova_with_reductions(current)


def _eliminate_fixed(fit: GlmmResult, current: GlmmResult, ddf: str, alpha: float
                     ) -> Tuple[StepFixedTable, GlmmResult]:
    """The fixed-effect terms' rounds from ``current`` (fitted with ``ddf``'s F tests): the table
    and the model found."""
    out = StepFixedTable()
    while True:
        scope = [name for name, _ in marginal_terms(current._spec)]
        tests = current.anova_type3 or {}
        missing = [name for name in scope if name not in tests]
        if missing:
            raise ValueError(f"step: no F test of {missing[0]!r} in the fit of "
                             f"{current.formula!r}: {current.warning or 'the fit gave no table'}")
        k = _worst(((j, tests[name][5]) for j, name in enumerate(scope)), alpha)
        if k is None:
            for name in scope:
                out.add(name, 0, tests[name])
            return out, current
        out.add(scope[k], len(out.names) + 1, tests[scope[k]])
        current = _refit(fit, _formula(current, fixed_left_out=scope[k]), ddf)


def _add_row(out: StepRandomTable, table: RanovaResult, k: int,
             eliminated: Optional[int]) -> None:
    """Row ``k`` of a round's ranova ``table`` appended to ``out``."""
    for column in ("names", "n_params", "loglik", "aic", "lrt", "df", "p_value"):
        getattr(out, column).append(getattr(table, column)[k])
    out.eliminated.append(eliminated)


def _refit(fit: GlmmResult, formula: Optional[str], ddf: Optional[str]) -> GlmmResult:
    """``formula`` fitted as ``fit`` was: its data, weights, offset, criterion, nodes and
    M-steps; with ``ddf``'s F tests where given."""
    s = fit._model
    source = s["source"]
    return glmm(formula, data=source["data"], offset=source["offset"],
                weights=source["weights"], reml=bool(fit.reml), nodes=s["nodes"],
                max_msteps=s["max_msteps"], ddf=ddf)


def _formula(fit: GlmmResult, random_left_out: Optional[Tuple[int, int]] = None,
             fixed_left_out: Optional[str] = None) -> Optional[str]:
    """``fit``'s model as a formula, written from its terms (lme4's notation, each random term
    with its own grouping), less effect e of random term t (``random_left_out``) or a
    fixed-effect term; None where no random term would be left."""
    spec, s = fit._spec, fit._model
    lhs = str(fit.formula).split("~")[0].strip()
    fixed = [str(t) for t in spec.fixed.term_slices if str(t) != fixed_left_out]
    terms = [t for t in fixed if t != "1"]
    rhs = terms if "1" in fixed else ["0"] + terms
    rhs = rhs or ["1"]
    rhs += [f"offset({o})" for o in spec.offsets]
    random = []
    for t, ((group, _), effects) in enumerate(zip(s["terms"], effects_of(fit))):
        names = [name for j, (name, _) in enumerate(effects)
                 if random_left_out != (t, j)]
        if not names:
            continue
        written = ["1" if "1" in names else "0"] + [n for n in names if n != "1"]
        bar = "|" if s["core"]["correlated"][t] or len(names) == 1 else "||"
        random.append(f"({' + '.join(written)} {bar} {group})")
    if not random:
        return None
    return f"{lhs} ~ {' + '.join(rhs + random)}"
