"""sagd.glmm against R's lme4 on the same data: random-intercept models of the three families
(lme4: glmer with 25-point adaptive quadrature, lmer by maximum likelihood for the Gaussian),
correlated random intercepts and slopes (Poisson; glmer's Laplace approximation) and crossed
random intercepts (Gaussian; lmer).
Prints a Markdown table of the estimates, standard errors, log-likelihoods and times.

Run: python crates/sagd-py/bench/lme4.py   (needs Rscript with lme4: Debian's r-cran-lme4)
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import sagd  # noqa: E402
from conftest import simulate  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def slopes_data(seed=11, groups=60, per=8):
    """Poisson counts with correlated random intercepts and slopes (sds 0.5, 0.3; cor 0.6)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), per)
    x = rng.normal(size=groups * per)
    S = np.array([[0.25, 0.09], [0.09, 0.09]])
    b = rng.multivariate_normal([0, 0], S, size=groups)
    y = rng.poisson(np.exp(0.5 + 0.3 * x + b[g, 0] + b[g, 1] * x)).astype(float)
    return y, x, g


def crossed_data(seed=12, a=20, b=15):
    """Gaussian responses with crossed random intercepts (20 subjects x 15 items, one each)."""
    rng = np.random.default_rng(seed)
    g, h = np.repeat(np.arange(a), b), np.tile(np.arange(b), a)
    x = rng.normal(size=a * b)
    y = (1.0 + 0.5 * x + rng.normal(scale=0.7, size=a)[g] + rng.normal(scale=0.4, size=b)[h]
         + rng.normal(scale=0.5, size=a * b))
    return y, x, g, h


def main():
    tmp = tempfile.mkdtemp()
    fits, files = {}, []

    def save(model, columns, names):
        path = os.path.join(tmp, f"data-{model}.csv")
        np.savetxt(path, np.column_stack(columns), delimiter=",", header=",".join(names),
                   comments="", fmt="%.17g")
        files.append(path)

    def timed(model, sat, *args, **kw):
        t = time.perf_counter()
        r = sagd.glmm(*args, seed=1, **kw)
        fits[model] = (r, time.perf_counter() - t, sat)

    for family, groups in [("gaussian", 50), ("poisson", 50), ("binomial", 60)]:
        y, X, g = simulate(family, groups=groups)
        save(family, [y, X[:, 1], g], ["y", "x", "g"])
        # lme4's log-likelihood with nAGQ > 1 leaves out the saturated model's (Poisson: Σ y log y
        # − y − log y!; 0 for Bernoulli), a constant in θ: added back to compare.
        sat = 0.0
        if family == "poisson":
            from scipy.special import gammaln, xlogy
            sat = float(np.sum(xlogy(y, y) - y - gammaln(y + 1)))
        timed(family, sat, y, X, g, family=family)
    y, x, g = slopes_data()
    save("slopes", [y, x, g], ["y", "x", "g"])
    X = np.column_stack([np.ones_like(x), x])
    timed("slopes", 0.0, y, X, g, family="poisson", Z=X, correlated=True)
    y, x, g, h = crossed_data()
    save("crossed", [y, x, g, h], ["y", "x", "g", "h"])
    timed("crossed", 0.0, y, np.column_stack([np.ones_like(x), x]), [g, h], family="gaussian")
    out = subprocess.run(["Rscript", os.path.join(HERE, "lme4.R"), *files], check=True,
                         capture_output=True, text=True).stdout
    print("| model | | (Intercept) | x | random-effect sds (, cor) | log-likelihood | seconds |")
    print("|---|---|---|---|---|---|---|")
    print("| | | estimate (se) [Monte Carlo error] | | | | |")
    for line in out.strip().splitlines():
        l = json.loads(line)
        model = l["file"].rsplit("-", 1)[1][:-4]
        r, secs, sat = fits[model]
        sds = ", ".join(f"{s:.4f} ({e:.4f})" for s, e in zip(r.random_sd, r.random_sd_se))
        if model == "slopes":
            sds += f", {r.random_cor[0][0, 1]:.3f}"
        ll = f"{r.loglik:.3f}" + (f" ± {r.loglik_se:.3f}" if r.loglik_se else "")
        print(f"| {model} | sagd | {r.fixed[0]:.4f} ({r.fixed_se[0]:.4f}) [{r.mc_se[0]:.4f}] | "
              f"{r.fixed[1]:.4f} ({r.fixed_se[1]:.4f}) [{r.mc_se[1]:.4f}] | {sds} | {ll} | "
              f"{secs:.2f} |")
        lsd = ", ".join(f"{s:.4f}" for s in l["sd"] + l["cor"])
        print(f"| | lme4 | {l['beta'][0]:.4f} ({l['se'][0]:.4f}) | {l['beta'][1]:.4f} "
              f"({l['se'][1]:.4f}) | {lsd} | {l['loglik'] + sat:.3f} | {l['seconds']:.2f} |")


if __name__ == "__main__":
    main()
