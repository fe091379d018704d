"""lme4's formulas for `sagd.glmm`: ``y ~ x + (1 + x | g)`` on a pandas DataFrame.

formulaic builds every design matrix (the fixed effects, and each random-effect term's
left-hand side); this module only separates lme4's bar terms from the rest: ``(Z | g)`` with
correlated effects, ``(Z || g)`` with independent ones, a grouping factor ``g``, an interaction
``a:b`` or a nesting ``a/b`` (the terms ``a`` and ``a:b``), and ``cbind(successes, failures)`` as
the binomial response; and ``offset(expr)`` terms, evaluated as formulaic's ``I(expr)`` and
summed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

_BAR = re.compile(r"\(([^()|]*)(\|\|?)([^()|]+)\)")
_CBIND = re.compile(r"^\s*cbind\s*\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)\s*$")
_NAME = re.compile(r"[A-Za-z_.][A-Za-z0-9_.]*")
_OFFSET = re.compile(r"^offset\s*\((.*)\)$", re.S)


@dataclass
class Design:
    """What a formula asks of ``sagd.glmm``'s array arguments."""

    y: np.ndarray
    X: np.ndarray
    x_names: List[str]
    groups: Dict[str, np.ndarray]
    Z: List[np.ndarray]
    z_names: List[List[str]]
    correlated: List[bool]
    trials: Optional[np.ndarray]
    dropped: int
    # The sum of the formula's offset(...) terms on the rows kept (None without any).
    offset: Optional[np.ndarray] = None
    # The rows kept: their indices in the data frame.
    rows: Optional[np.ndarray] = None
    # How the matrices were built, to build new rows' alike (`new_rows`).
    spec: Optional["Spec"] = None

    def kept(self, v: Any, name: str) -> np.ndarray:
        """`v`, one value per row of the data frame, on the rows kept."""
        a = np.asarray(v, dtype=float)
        if a.ndim != 1 or self.rows is None or a.shape[0] != self.dropped + len(self.y):
            raise ValueError(f"{name}: expected one value per row of data "
                             f"({self.dropped + len(self.y)}), got shape {a.shape}")
        return a[self.rows]


@dataclass
class Spec:
    """How a formula's matrices were built from the fitted rows: formulaic's specs of the fixed
    effects and of each grouping factor's effects (so that new rows get the same columns and
    levels), each factor's columns, the offsets' expressions and the columns the right-hand side
    reads."""

    fixed: Any
    terms: List[Any]
    group_parts: List[List[str]]
    offsets: List[str]
    columns: List[str]
    # The fitted rows' values of each text column the effects read as categorical.
    levels: Dict[str, List[Any]]


def _bad(formula: str, why: str, fix: str) -> ValueError:
    return ValueError(f"formula {formula!r}: {why}; {fix}")


def _refuse_saturated(formula: str, df: Any, names: set) -> None:
    """Refuses, by name, a text fixed-effect predictor with a different value on every one of the
    rows (two or more), as the command line does: its levels alone fit every row, so no fixed
    effect can be estimated. Most often numbers written as text (``np.float64(0.36)``)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if len(df) < 2:
        return
    for name in sorted(names):
        col = df[name]
        if is_numeric_dtype(col) or is_bool_dtype(col) or col.nunique() < len(df):
            continue
        raise _bad(formula, f"column {name!r} is text with a different value on each of its "
                   f"{len(df)} rows (the first {col.iloc[0]!r})",
                   "as a categorical predictor it gives every row a fixed effect of its own, "
                   "which no model can estimate: if the column holds numbers, convert it "
                   "(pd.to_numeric); else leave it out of the fixed effects, or make it a "
                   "grouping factor")


def _terms(expr: str) -> List[str]:
    """The non-empty terms of a sum, split at its top-level '+'."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(expr + "+"):
        depth += (c == "(") - (c == ")")
        if c == "+" and depth == 0:
            terms.append(expr[start:i].strip())
            start = i + 1
    return [t for t in terms if t]


def _lme4_names(columns: Any) -> List[str]:
    return ["(Intercept)" if c == "Intercept" else str(c) for c in columns]


def parse(formula: str, data: Any) -> Design:
    """The design matrices of ``formula`` on ``data`` (a pandas DataFrame, or anything
    ``pandas.DataFrame`` accepts), rows with a missing value in any variable it uses dropped
    (lme4's ``na.omit``)."""
    try:
        import pandas as pd
        from formulaic import model_matrix
    except ImportError:
        raise ImportError("formulas need pandas and formulaic: pip install pandas formulaic "
                          "(or pip install 'sagd[formula]')") from None
    if data is None:
        raise ValueError("data: a formula needs the data frame its names refer to "
                         "(data=df)")
    df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    if formula.count("~") != 1:
        raise _bad(formula, "no single '~'", "write it as response ~ terms, e.g. "
                   "'y ~ x + (1 | g)'")
    lhs, rhs = (s.strip() for s in formula.split("~"))
    bars = _BAR.findall(rhs)
    if not bars:
        raise _bad(formula, "no random-effect term", "add one such as (1 | g), or fit a "
                   "model without random effects with another tool")
    fixed = _BAR.sub(" ", rhs)
    if "|" in fixed:
        raise _bad(formula, "a '|' outside parentheses", "write random effects as (terms | g)")
    terms = _terms(fixed)
    # Different offsets are summed; one written twice counts once, as in R.
    offsets = list(dict.fromkeys("".join(m.group(1).split())
                                 for m in map(_OFFSET.match, terms) if m))
    fixed = " + ".join(t for t in terms if not _OFFSET.match(t)) or "1"
    used = set(_NAME.findall(lhs + " " + rhs)) & set(map(str, df.columns))
    missing = [n for n in set(_NAME.findall(lhs)) if n not in df.columns and n != "cbind"]
    if missing:
        raise _bad(formula, f"no column {missing[0]!r} in data",
                   f"use one of {list(map(str, df.columns))[:12]}")
    before = len(df)
    rows = np.flatnonzero(df[sorted(used)].notna().all(axis=1).to_numpy())
    df = df.iloc[rows].reset_index(drop=True)
    if len(df) == 0:
        raise ValueError(f"data: no row without a missing value in {sorted(used)}")

    def design(expr: str, what: str) -> Any:
        try:
            return model_matrix(expr, df, na_action="raise")
        except Exception as e:  # formulaic's errors name the term; add where it was
            raise _bad(formula, f"{what} {expr!r}: {e}", "check the names and the syntax") \
                from None

    y, trials = _response(formula, lhs, design)
    _refuse_saturated(formula, df, set(_NAME.findall(fixed)) & set(map(str, df.columns)))
    X = design(fixed, "the fixed effects")
    groups: Dict[str, np.ndarray] = {}
    Z, z_names, correlated = [], [], []
    z_specs: List[Any] = []
    group_parts: List[List[str]] = []
    for effects, bar, grouping in bars:
        z = design(effects.strip() or "1", "the random effects")
        factors = [g.strip() for g in grouping.split("/")]
        nested = [":".join(factors[:k + 1]) for k in range(len(factors))]
        for name in nested:
            parts = [p.strip() for p in name.split(":")]
            absent = [p for p in parts if p not in df.columns]
            if absent:
                raise _bad(formula, f"no grouping column {absent[0]!r} in data",
                           f"use one of {list(map(str, df.columns))[:12]}")
            label = name if len(parts) > 1 else parts[0]
            if label in groups:
                raise _bad(formula, f"the grouping factor {label!r} twice",
                           "combine its terms in one (a + b | g), or use (a || g)")
            groups[label] = _labels(df, parts)
            Z.append(z.to_numpy(dtype=float))
            z_names.append(_lme4_names(z.columns))
            correlated.append(bar == "|")
            z_specs.append(z.model_spec)
            group_parts.append(parts)
    offset = _offset(formula, offsets, design, rows)
    return Design(y=np.asarray(y, dtype=float), X=X.to_numpy(dtype=float),
                  x_names=_lme4_names(X.columns), groups=groups, Z=Z, z_names=z_names,
                  correlated=correlated, trials=trials, dropped=before - len(df),
                  offset=offset, rows=rows,
                  spec=Spec(fixed=X.model_spec, terms=z_specs, group_parts=group_parts,
                            offsets=offsets,
                            columns=sorted(set(_NAME.findall(rhs)) & set(map(str, df.columns))),
                            levels=_categorical(df, [fixed] + [e for e, _, _ in bars])))


def _response(formula: str, lhs: str, design: Any) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """The response and, for ``cbind(successes, failures)``, the trials, from the formula's
    left side through ``design`` (a term's model matrix on the rows kept)."""
    pair = _CBIND.match(lhs)
    if pair:
        # I(...): the arguments are arithmetic (n - s), not formulas.
        succ, fail = (design(f"0 + I({c})", "the response").to_numpy()[:, 0]
                      for c in pair.groups())
        return succ.astype(float), (succ + fail).astype(float)
    y = design(f"0 + {lhs}", "the response").to_numpy(dtype=float)
    if y.shape[1] != 1:
        raise _bad(formula, f"the response {lhs!r} is not one numeric column",
                   "give a numeric column (0/1 or counts), or cbind(successes, failures)")
    return y[:, 0], None


def _offset(formula: str, offsets: List[str], design: Any,
            rows: np.ndarray) -> Optional[np.ndarray]:
    """The sum of the formula's ``offset(...)`` expressions on the rows kept (their numbers in
    the data, ``rows``), refused by name where one is not finite; None without any."""
    offset = None
    for expr in offsets:
        # A log of 0 is named below with its row, not warned of by numpy.
        with np.errstate(divide="ignore", invalid="ignore"):
            o = design(f"0 + I({expr})", "the offset").to_numpy(dtype=float)[:, 0]
        bad = np.flatnonzero(~np.isfinite(o))
        if bad.size:
            raise _bad(formula, f"offset({expr}) is {o[bad[0]]} at data row {rows[bad[0]] + 1}",
                       "give offsets that are finite (the log of an exposure needs it above 0)")
        offset = o if offset is None else offset + o
    return offset


def type3_coding(spec: Spec, data: Any,
                 rows: np.ndarray) -> Tuple[List[str], np.ndarray, List[Tuple[int, int]]]:
    """lmerTest's type III coding of a formula fit's fixed effects: the fitted rows (``rows`` of
    ``data``) coded again with every categorical variable by sum-to-zero contrasts (R's
    ``contr.sum``), and per term but the intercept its name and columns there; the core turns
    them into each term's hypothesis on the fit's own coefficients. Refused (ValueError) where a
    term codes a variable itself (``C(...)``) or the codings do not match term by term."""
    import pandas as pd
    from formulaic import model_matrix

    df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    df = df.iloc[rows].reset_index(drop=True)
    terms, names = [], []
    for term in spec.fixed.formula:
        factors = []
        for f in term.factors:
            if f.expr.replace(" ", "").startswith("C("):
                raise ValueError(f"the term {term} codes its variable itself ({f.expr}); write "
                                 "the variable alone to have its type III test")
            factors.append(f"C({f.expr}, contr.sum)" if f.expr in spec.levels else f.expr)
        terms.append(":".join(factors))
        names.append(str(term))
    intercept = "1" in names
    xs = model_matrix(("" if intercept else "0 + ") + " + ".join(terms), df, na_action="raise")
    fitted = list(spec.fixed.term_slices.values())
    slices = list(xs.model_spec.term_slices.values())
    widths = [(s.stop - s.start) for s in fitted]
    if len(slices) != len(fitted) or [(s.stop - s.start) for s in slices] != widths:
        raise ValueError("the sum-to-zero coding of the fixed effects does not match their "
                         "coding term by term")
    kept = [(n, (s.start, s.stop)) for n, s in zip(names, slices) if n != "1"]
    return ([n for n, _ in kept], np.ascontiguousarray(xs.to_numpy(dtype=float)),
            [r for _, r in kept])


def anova_terms(spec: Spec, kind: int) -> Tuple[int, List[str], List[Tuple[int, int]],
                                                List[List[int]]]:
    """The terms of lmerTest's type ``kind`` (1 or 2) table of a formula fit: per term but the
    intercept its name, its columns of the fit's design and the terms that contain it (all its
    variables and more, the same numeric ones: lmerTest's rule, a variable categorical where
    it is a text column or written ``C(...)``). The core makes each term's hypothesis from the
    design as the command line's."""
    terms = [(str(t), [f.expr for f in t.factors], (s.start, s.stop))
             for t, s in spec.fixed.term_slices.items() if str(t) != "1"]

    def numeric(exprs: List[str]) -> set:
        return {e for e in exprs
                if e not in spec.levels and not e.replace(" ", "").startswith("C(")}

    contains = [[k for k, (_, big, _) in enumerate(terms)
                 if set(small) < set(big) and numeric(small) == numeric(big)]
                for _, small, _ in terms]
    return int(kind), [t[0] for t in terms], [t[2] for t in terms], contains


# The most rows of least-squares means' reference grid.
_MAX_GRID = 1_000_000


_PLAIN_C = re.compile(r"^C\(\s*([A-Za-z_.][A-Za-z0-9_.]*)\s*\)$")


def ls_means_coding(spec: Spec, data: Any,
                    rows: np.ndarray) -> Tuple[List[str], List[str], np.ndarray]:
    """lmerTest's least-squares means of a formula fit's fixed effects: per term whose
    variables are all categorical (text columns, or a column written ``C(x)``), per combination
    of their levels (named as R names them, ``Alo:Bu``, ``C(d)2``, the first variable's level
    changing fastest), the row L of the fit's fixed effects whose L beta is that combination's
    mean over the reference grid: every level of the other categorical variables, each as
    often, and every numeric column at its mean over the fitted rows (``rows`` of ``data``); a
    term's rows consecutive, as (terms, names, L). The core tests them as the command line's.
    Refused (ValueError) where ``C(...)`` has more than a column, where a column is read both
    ways, where no term is of categorical variables only, and for a grid of over a million
    rows."""
    import itertools

    import pandas as pd

    df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    df = df.iloc[rows].reset_index(drop=True)
    terms = [t for t in spec.fixed.formula if str(t) != "1"]
    exprs = list(dict.fromkeys(f.expr for t in terms for f in t.factors))
    # Each categorical variable's column and levels (a C(x)'s: x's values, sorted).
    factors: Dict[str, Tuple[str, List[Any]]] = {}
    for e in exprs:
        plain = _PLAIN_C.match(e.replace(" ", ""))
        if plain and plain.group(1) in df.columns:
            factors[e] = (plain.group(1), sorted(set(df[plain.group(1)].tolist())))
        elif e.replace(" ", "").startswith("C("):
            raise ValueError(f"{e} codes its variable with more than its column; write "
                             "C(column) or the column alone to have its least-squares means")
        elif e in spec.levels:
            factors[e] = (e, list(spec.levels[e]))
    columns = list(dict.fromkeys(n for e in exprs if e not in factors
                                 for n in _NAME.findall(e) if n in df.columns))
    both = [c for c, _ in factors.values() if c in columns]
    if both:
        raise ValueError(f"{both[0]!r} is read both as a number and as a category; add a copy "
                         "of the column under another name")
    means = [t for t in terms if all(f.expr in factors for f in t.factors)]
    if not means:
        raise ValueError("the fixed effects have no term of categorical variables only")
    size = int(np.prod([len(lv) for _, lv in factors.values()]))
    if size > _MAX_GRID:
        raise ValueError(f"a reference grid of {size} rows (every combination of the "
                         "categorical variables' levels); fit a model with fewer or coarser "
                         "factors")
    # The grid, the first variable's level changing fastest.
    order = list(factors)
    combos = [c[::-1] for c in itertools.product(*(factors[f][1] for f in order[::-1]))]
    grid = pd.DataFrame(combos, columns=[factors[f][0] for f in order])
    for c in columns:
        grid[c] = float(df[c].mean())
    X = spec.fixed.get_model_matrix(grid).to_numpy(dtype=float)
    names, labels, rows_l = [], [], []
    for term in means:
        vs = [factors[f.expr] for f in term.factors]
        # Each grid row's combination of the term's levels, the first variable's fastest.
        index = np.zeros(len(grid), dtype=int)
        scale = 1
        for column, lv in vs:
            index += grid[column].map({v: k for k, v in enumerate(lv)}).to_numpy(dtype=int) \
                * scale
            scale *= len(lv)
        for k in range(scale):
            parts, rest = [], k
            for f, (_, lv) in zip(term.factors, vs):
                parts.append(f"{f.expr}{lv[rest % len(lv)]}")
                rest //= len(lv)
            names.append(str(term))
            labels.append(":".join(parts))
            rows_l.append(X[index == k].mean(axis=0))
    return names, labels, np.ascontiguousarray(np.array(rows_l, dtype=float))


def _categorical(df: Any, exprs: List[str]) -> Dict[str, List[Any]]:
    """The values of each column that is not numeric among those `exprs` read."""
    names = set().union(*(_NAME.findall(e) for e in exprs)) & set(map(str, df.columns))
    return {n: sorted(set(df[n].tolist()), key=str) for n in sorted(names)
            if df[n].dtype.kind not in "iuf"}


def _labels(df: Any, parts: List[str]) -> np.ndarray:
    """A grouping factor's label at each row: its column's values, or its columns' joined by
    ':' for an interaction."""
    if len(parts) == 1:
        return df[parts[0]].to_numpy()
    return df[parts].astype(str).agg(":".join, axis=1).to_numpy()


def new_rows(spec: Spec, data: Any) -> Tuple[np.ndarray, List[np.ndarray], List[np.ndarray],
                                              Optional[np.ndarray], np.ndarray]:
    """New rows' arrays, built as the fitted rows' were: the fixed effects' X, each grouping
    factor's labels and Z, the summed offsets, and which rows of ``data`` have every value
    the right-hand side reads (the others get none)."""
    import pandas as pd
    from formulaic import model_matrix

    df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    absent = [c for c in spec.columns if c not in df.columns]
    if absent:
        raise ValueError(f"newdata: no column {absent[0]!r}, which the formula uses; new rows "
                         "need every predictor, grouping factor and offset (not the response)")
    rows = np.flatnonzero(df[spec.columns].notna().all(axis=1).to_numpy())
    df = df.iloc[rows].reset_index(drop=True)
    for name, known in spec.levels.items():
        fresh = ~df[name].isin(known).to_numpy()
        if fresh.any():
            k = int(np.flatnonzero(fresh)[0])
            raise ValueError(f"newdata: {name!r} is {df[name].iloc[k]!r} at row {rows[k]}, a "
                             "level the fitted data do not have; predict for the levels the "
                             f"model was fitted to ({', '.join(map(str, known))})")

    def build(what: str, make: Any) -> np.ndarray:
        try:
            return make().to_numpy(dtype=float)
        except Exception as e:  # formulaic names the term and the level it has not seen
            raise ValueError(f"newdata: {what}: {e}; predict for the levels the model was "
                             "fitted to") from None

    X = build("the fixed effects", lambda: spec.fixed.get_model_matrix(df))
    Zs = [build("the random effects", lambda z=z: z.get_model_matrix(df)) for z in spec.terms]
    labels = [_labels(df, parts) for parts in spec.group_parts]
    offset = None
    for expr in spec.offsets:
        with np.errstate(divide="ignore", invalid="ignore"):
            o = build("the offset", lambda: model_matrix(f"0 + I({expr})", df))[:, 0]
        offset = o if offset is None else offset + o
    return X, labels, Zs, offset, rows
