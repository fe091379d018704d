"""Each level's random effects given the data, `sagd.glmm`'s `ranef` and `ranef_sd` against
lme4's `ranef(fit, condVar = TRUE)`, on simulated data where both fits are exact (lmer's ML fit of
crossed Gaussian intercepts, glmer with 25-point adaptive quadrature for Poisson and Bernoulli
intercepts); and its exact conditional means `ranef_mean` and sds `ranef_mean_sd` against R's
`integrate` of b p(b | y) at glmer's estimate, level by level.

    python crates/sagd-py/bench/ranef.py [--out table.md]

Needs Rscript with lme4 (Debian: r-cran-lme4); prints a markdown table of the largest
differences, which are those of the two maximisers' estimates of theta.
"""

import argparse
import os
import shutil
import subprocess
import tempfile

import numpy as np

import sagd

R_SCRIPT = r"""
suppressMessages(library(lme4))
args <- commandArgs(trailingOnly = TRUE)
d <- read.csv(args[1])
m <- if (args[2] == "gaussian") {
  lmer(as.formula(args[3]), data = d, REML = FALSE)
} else {
  glmer(as.formula(args[3]), data = d, family = args[2], nAGQ = 25)
}
r <- ranef(m, condVar = TRUE)
out <- do.call(rbind, lapply(names(r), function(g) {
  data.frame(group = g, level = rownames(r[[g]]), mode = r[[g]][, 1],
             sd = sqrt(attr(r[[g]], "postVar")[1, 1, ]), mean = NA, mean_sd = NA)
}))
if (args[2] != "gaussian") {
  # One grouping factor g: each level's posterior moments by integrate at glmer's estimate.
  eta0 <- drop(model.matrix(m) %*% fixef(m))
  tau <- sqrt(VarCorr(m)$g[1])
  y <- model.response(model.frame(m))
  dens_row <- if (args[2] == "poisson") function(y, eta) dpois(y, exp(eta), log = TRUE) else
    function(y, eta) dbinom(y, 1, plogis(eta), log = TRUE)
  for (k in seq_len(nrow(out))) {
    rows <- d$g == out$level[k]
    lp <- function(b) sapply(b, function(v) sum(dens_row(y[rows], eta0[rows] + v))) +
      dnorm(b, 0, tau, log = TRUE)
    c0 <- out$mode[k]; w <- 15 * out$sd[k]; top <- lp(c0)
    moment <- function(f) integrate(function(b) f(b) * exp(lp(b) - top), c0 - w, c0 + w,
                                    rel.tol = 1e-12, subdivisions = 1000)$value
    z <- moment(function(b) 1)
    out$mean[k] <- moment(function(b) b) / z
    out$mean_sd[k] <- sqrt(moment(function(b) (b - out$mean[k])^2) / z)
  }
}
write.csv(out, args[4], row.names = FALSE)
"""


def simulate(case, rng):
    """The data of `case`: y, the covariate, and the grouping factors' labels by name."""
    if case == "crossed":
        n, a_levels, b_levels = 6000, 300, 200
        a, b = rng.integers(0, a_levels, n), rng.integers(0, b_levels, n)
        x = rng.normal(size=n)
        y = (1 + 0.5 * x + rng.normal(0, 0.7, a_levels)[a] + rng.normal(0, 0.4, b_levels)[b]
             + rng.normal(0, 1, n))
        return y, x, {"a": np.char.add("a", a.astype(str)), "b": np.char.add("b", b.astype(str))}
    if case == "bernoulli":
        groups, per = 500, 4
        g = np.repeat(np.arange(groups), per)
        x = rng.normal(size=groups * per)
        eta = -0.5 + 0.3 * x + rng.normal(0, 1.0, groups)[g]
        y = (rng.random(groups * per) < 1 / (1 + np.exp(-eta))).astype(float)
        return y, x, {"g": np.char.add("g", g.astype(str))}
    groups, per = 3000, 5
    g = np.repeat(np.arange(groups), per)
    x = rng.normal(size=groups * per)
    y = rng.poisson(np.exp(2 + 0.3 * x + rng.normal(0, 0.5, groups)[g])).astype(float)
    return y, x, {"g": np.char.add("g", g.astype(str))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the table here")
    args = ap.parse_args()
    rscript = shutil.which("Rscript")
    if rscript is None:
        raise SystemExit("Rscript not found (Debian: r-base-core, r-cran-lme4)")
    rng = np.random.default_rng(4)
    rows = ["| data | factor | levels | largest mode difference | largest sd difference "
            "| largest mode | largest mean difference | largest mean sd difference "
            "| largest \\|mean − mode\\| / sd |", "|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ranef.R")
        with open(script, "w") as f:
            f.write(R_SCRIPT)
        for case, family in [("crossed", "gaussian"), ("intercepts", "poisson"),
                             ("bernoulli", "binomial")]:
            y, x, factors = simulate(case, rng)
            X = np.column_stack([np.ones_like(x), x])
            fit = sagd.glmm(y, X, factors if len(factors) > 1 else next(iter(factors.values())),
                            family=family)
            data = os.path.join(tmp, f"{case}.csv")
            cols = {"y": y, "x": x, **factors}
            with open(data, "w") as f:
                f.write(",".join(cols) + "\n")
                for r in zip(*cols.values()):
                    f.write(",".join(str(v) for v in r) + "\n")
            formula = "y ~ x + " + " + ".join(f"(1 | {g})" for g in factors)
            ref = os.path.join(tmp, f"{case}-lme4.csv")
            subprocess.run([rscript, script, data, family, formula, ref], check=True,
                           capture_output=True)
            with open(ref) as f:
                lines = [line.strip().split(",") for line in f.readlines()[1:]]
            for name in factors:
                ours = fit.ranef if len(factors) == 1 else fit.ranef[name]
                ours_sd = fit.ranef_sd if len(factors) == 1 else fit.ranef_sd[name]
                labels = fit.groups if len(factors) == 1 else fit.groups[name]
                at = {str(label): j for j, label in enumerate(labels)}
                theirs = [(at[r[1].strip('"')], float(r[2]), float(r[3]))
                          for r in lines if r[0].strip('"') == name]
                dm = max(abs(ours[j, 0] - m) for j, m, _ in theirs)
                ds = max(abs(ours_sd[j, 0] - s) for j, _, s in theirs)
                top = max(abs(m) for _, m, _ in theirs)
                means = "| | |"
                if family != "gaussian":
                    moments = [(at[r[1].strip('"')], float(r[4]), float(r[5])) for r in lines]
                    mean, mean_sd = fit.ranef_mean, fit.ranef_mean_sd
                    d_mean = max(abs(mean[j, 0] - m) for j, m, _ in moments)
                    d_sd = max(abs(mean_sd[j, 0] - s) for j, _, s in moments)
                    gap = max(abs(m - ours[j, 0]) / s for j, m, s in moments)
                    means = f"{d_mean:.1e} | {d_sd:.1e} | {gap:.3f} |"
                rows.append(f"| {case} ({family}, {len(y)} rows) | {name} | {len(theirs)} "
                            f"| {dm:.1e} | {ds:.1e} | {top:.3f} | {means}")
    table = "\n".join(rows)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
