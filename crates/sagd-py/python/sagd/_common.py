"""What the entry points share: argument checks, the progress display, tables, and the result
of automated EM (`FitResult`)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

import numpy as np


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


def _whole(name: str, value: Any, least: int = 0) -> int:
    """``value`` as an int, refusing fractions (30.9), non-numbers and values below ``least``
    with a ValueError naming ``name`` (``int()`` would truncate silently)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: {value!r} is not a whole number")
    if isinstance(value, (float, np.floating)) and not (math.isfinite(value)
                                                        and float(value).is_integer()):
        raise ValueError(f"{name}: {value!r} is not a whole number")
    v = int(value)
    if v < least:
        raise ValueError(f"{name}: {v}; give at least {least}")
    # Beyond this the core cannot take it at all (it would be an OverflowError, not a message).
    if v >= 2**63:
        raise ValueError(f"{name}: {v}; give a whole number below 2**63")
    return v


def _threads(value: Any) -> Optional[int]:
    """The worker threads: None (all cores) or a whole number (bounded by the core)."""
    return None if value is None else _whole("threads", value, 1)


def _matrix(name: str, value: Any, n: int, least: int = 1) -> np.ndarray:
    """``value`` as a contiguous float64 n x k matrix (a vector is one column), k >= ``least``."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: not numbers ({e})") from None
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] != n:
        raise ValueError(f"{name}: expected {n} rows (one per observation), got shape {a.shape}")
    if a.shape[1] < least:
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
    # The bar appears with the first work it counts (a run may ask for a second one, such as
    # a bootstrap's after a fit's, before the first has begun).
    bars: List[Any] = []

    def update(done: int) -> None:
        if not bars:
            bars.append(tqdm(total=total, desc=desc, unit="update"))
        bars[0].update(done - bars[0].n)

    return update, lambda: [b.close() for b in bars]


def _num(v: float, width: int) -> str:
    """`v` in `width` columns with 4 decimals, or in scientific notation with 4 significant digits
    where the decimals would hide it (below 1e-3) or it would run past its column (1e7 and
    above), as `sagd glmm` prints: a response in small or large units reads as in the usual."""
    if v == 0 or not math.isfinite(v) or 1e-3 <= abs(v) < 1e7:
        return f"{v:{width}.4f}"
    return f"{v:{width}.3e}"


# A table's column: its header, its width, how a value is written, and its values (None: blank).
Column = Tuple[str, int, Any, Sequence[Any]]


def _text_table(names: Sequence[str], columns: Sequence[Column], least: int = 0) -> List[str]:
    """The header and one line per name of a table as R prints one: the names left-aligned in
    the widest name's width (at least ``least``), each column right-aligned in its width, a
    blank where a value is None, and no trailing blanks."""
    width = max([len(n) for n in names] + [least])
    head = f"{'':<{width}}" + "".join(f" {h:>{w}}" for h, w, _, _ in columns)
    lines = [head]
    for k, name in enumerate(names):
        cells = "".join(f" {'' if v[k] is None else show(v[k]):>{w}}" for _, w, show, v in columns)
        lines.append((f"{name:<{width}}" + cells).rstrip())
    return lines


def _table(rows: List[Tuple[str, float, float, float, float]], title: str) -> str:
    """Rows of (name, estimate, its Monte Carlo error, standard error, the standard error's own
    Monte Carlo error). The Monte Carlo columns, and the line saying what they are, only where
    some row has one (an exact fit has none)."""
    width = max([len(r[0]) for r in rows] + [9])
    mc = any(not (math.isnan(r[2]) and math.isnan(r[4])) for r in rows)
    shown = lambda v, w: "" if math.isnan(v) else _num(v, w)  # noqa: E731
    head = f"{'':{width}}  {'estimate':>10}  {'std.err':>9}"
    lines = [title, head + (f"  {'MC error':>9}  {'its MC err':>10}" if mc else "")]
    for name, est, m, se, err in rows:
        line = f"{name:{width}}  {_num(est, 10)}  {_num(se, 9)}"
        if mc:
            line += f"  {shown(m, 9):>9}  {shown(err, 10):>10}"
        lines.append(line)
    if mc:
        lines.append("MC error: the estimate's own Monte Carlo error; its MC err: the standard "
                     "error's")
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
            ``polish_error`` says why); ``"exact"`` for a GLMM fitted by its exact likelihood.
        converged: whether EM's own stopping rule was met before the polish.
        msteps: M-steps run.
        path: theta after every update (rows).
        se_at: the theta where the information behind ``se`` was taken (``estimate``, or a
            point within 0.1 standard errors of it; ``se_error`` counts the difference).
        chain_rhat: with several chains per point, the largest R-hat of a point's score.
        warning: set when the standard errors are less precise than 10 %, or chains disagree.
        handover_rate: EM's rate per M-step when EM, being slow, handed its estimate to the
            polish before its stopping rule held (None when it ran to its rule or its cap).
        em_resumed: why EM took its estimate back after that handover (every attempt of the
            polish failed); EM then ran on to its rule or its cap and the polish started again
            from there. None when the first polish served.
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
    handover_rate: Optional[float] = None
    em_resumed: Optional[str] = None

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
            handover_rate=d.get("handover_rate"),
            em_resumed=d.get("em_resumed"),
        )

    def _rows(self) -> List[Tuple[str, float, float, float, float]]:
        return [
            (n, float(e), float(m), float(s), float(r))
            for n, e, m, s, r in zip(self.names, self.estimate, self.mc_se, self.se,
                                     self.se_error)
        ]

    def __repr__(self) -> str:
        head = f"sagd fit: {self.status}, {self.msteps} M-steps"
        out = _table(self._rows(), head)
        if self.status != "polished":
            out += f"\nNOT polished: {self.polish_error}"
        if self.em_resumed:
            out += ("\nEM took its estimate back from a first polish that failed and ran on: "
                    f"{self.em_resumed}")
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


def _say_kept(stop: KeyboardInterrupt, checkpoint: Any) -> NoReturn:
    """Raises ``stop`` again, saying where a bootstrap's refits are kept when ``checkpoint``
    holds them (the same call goes on from there)."""
    if checkpoint is not None and os.path.exists(checkpoint):
        raise KeyboardInterrupt(f"{stop or 'interrupted'}: the bootstrap's refits done are kept "
                                f"in {os.fspath(checkpoint)}; the same call goes on from "
                                "there") from None
    raise stop
