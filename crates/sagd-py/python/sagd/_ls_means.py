"""lmerTest's least-squares means of a fit's fixed effects, as ``sagd.glmm(..., ls_means=...)``
gives them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._common import _text_table


@dataclass
class LsMeansResult:
    """lmerTest's ``ls_means(fit)`` (or, ``pairwise``, each pair's difference within a term):
    one entry per mean, in the table's order.

    Attributes:
        terms: each mean's term of the fixed effects (``"A"``, ``"A:B"``).
        names: each mean's name as lmerTest prints it (``"Alo"``, ``"Alo:Bu"``; pairwise
            ``"Ahi - Alo"``).
        estimate, se, df, t, lower, upper, p_value: L beta, its standard error, the degrees of
            freedom (``inf`` for Wald z tests), t (or z), the interval's ends at ``level``
            and the two-sided p-value.
        ddf: ``"satterthwaite"`` or ``"kenward_roger"`` (Gaussian fits), ``"wald"`` (the
            other families: z tests on the link's scale, emmeans' asymptotic ones).
        level: the intervals' level.
        pairwise: whether the rows are pairwise differences (ratios on the response scale).
        scale: ``"link"``, or ``"response"`` (rates or probabilities, pairwise ratios).
    """

    terms: List[str] = field(default_factory=list)
    names: List[str] = field(default_factory=list)
    estimate: List[float] = field(default_factory=list)
    se: List[float] = field(default_factory=list)
    df: List[float] = field(default_factory=list)
    t: List[float] = field(default_factory=list)
    lower: List[float] = field(default_factory=list)
    upper: List[float] = field(default_factory=list)
    p_value: List[float] = field(default_factory=list)
    ddf: str = ""
    level: float = 0.95
    pairwise: bool = False
    scale: str = "link"

    @classmethod
    def _of(cls, d: Optional[Dict[str, Any]]) -> Optional["LsMeansResult"]:
        """The table from the core's ``ls_means`` item (None without one)."""
        if d is None:
            return None
        rows = d["rows"]
        column = [[float(r[2][k]) for r in rows] for k in range(7)]
        return cls(terms=[r[0] for r in rows], names=[r[1] for r in rows],
                   estimate=column[0], se=column[1], df=column[2], t=column[3],
                   lower=column[4], upper=column[5], p_value=column[6], ddf=str(d["ddf"]),
                   level=float(d["level"]), pairwise=bool(d["pairwise"]),
                   scale=str(d.get("scale", "link")))

    def __repr__(self) -> str:
        what = "pairwise differences of least-squares means" if self.pairwise else \
            "least-squares means"
        if self.scale == "response":
            what = what.replace("differences", "ratios") + " on the response scale"
        how = {"satterthwaite": "Satterthwaite's degrees of freedom",
               "kenward_roger": "Kenward-Roger's degrees of freedom"}.get(
                   self.ddf, "Wald z tests on the link's scale")
        stat, p = ("z value", "Pr(>|z|)") if self.ddf == "wald" else ("t value", "Pr(>|t|)")
        f5 = "{:.5f}".format
        df = lambda v: "inf" if math.isinf(v) else f"{v:.1f}"  # noqa: E731
        table = _text_table(self.names, [
            ("Estimate", 10, f5, self.estimate), ("Std. Error", 11, f5, self.se),
            ("df", 7, df, self.df), (stat, 8, "{:.4f}".format, self.t),
            ("lower", 10, f5, self.lower), ("upper", 10, f5, self.upper),
            (p, 10, "{:.3g}".format, self.p_value)], least=1)
        return "\n".join([f"{what} (lmerTest's ls_means; {how}; {100 * self.level:g}% intervals):"]
                         + table)

    def to_pandas(self):
        """The table as a pandas DataFrame indexed by the means' names (needs pandas)."""
        import pandas as pd

        return pd.DataFrame({"term": self.terms, "Estimate": self.estimate,
                             "Std. Error": self.se, "df": self.df, "t value": self.t,
                             "lower": self.lower, "upper": self.upper,
                             "Pr(>|t|)": self.p_value}, index=self.names)
