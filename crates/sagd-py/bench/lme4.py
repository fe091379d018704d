"""sagd.glmm against R's lme4 on the same data: random-intercept models of the three families
(lme4: glmer with 25-point adaptive quadrature, lmer by maximum likelihood for the Gaussian).
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


def main():
    tmp = tempfile.mkdtemp()
    fits, files = {}, []
    for family, groups in [("gaussian", 50), ("poisson", 50), ("binomial", 60)]:
        y, X, g = simulate(family, groups=groups)
        path = os.path.join(tmp, f"data-{family}.csv")
        np.savetxt(path, np.column_stack([y, X[:, 1], g]), delimiter=",", header="y,x,g",
                   comments="", fmt=["%.17g", "%.17g", "%d"])
        files.append(path)
        t = time.perf_counter()
        r = sagd.glmm(y, X, g, family=family, seed=1)
        # lme4's log-likelihood with nAGQ > 1 leaves out the saturated model's (Poisson: Σ y log y
        # − y − log y!; 0 for Bernoulli), a constant in θ: added back to compare.
        sat = 0.0
        if family == "poisson":
            from scipy.special import gammaln, xlogy
            sat = float(np.sum(xlogy(y, y) - y - gammaln(y + 1)))
        fits[family] = (r, time.perf_counter() - t, sat)
    out = subprocess.run(["Rscript", os.path.join(HERE, "lme4.R"), *files], check=True,
                         capture_output=True, text=True).stdout
    print("| family | | (Intercept) | x | sd(g) | log-likelihood | seconds |")
    print("|---|---|---|---|---|---|---|")
    print("| | | estimate (se) [Monte Carlo error] | | | | |")
    for line in out.strip().splitlines():
        l = json.loads(line)
        family = l["file"].rsplit("-", 1)[1][:-4]
        r, secs, sat = fits[family]
        sd_mc = r.random_sd[0] * r.mc_se[2]
        print(f"| {family} | sagd | {r.fixed[0]:.4f} ({r.fixed_se[0]:.4f}) [{r.mc_se[0]:.4f}] | "
              f"{r.fixed[1]:.4f} ({r.fixed_se[1]:.4f}) [{r.mc_se[1]:.4f}] | "
              f"{r.random_sd[0]:.4f} [{sd_mc:.4f}] | {r.loglik:.3f} | {secs:.2f} |")
        print(f"| | lme4 | {l['beta'][0]:.4f} ({l['se'][0]:.4f}) | {l['beta'][1]:.4f} "
              f"({l['se'][1]:.4f}) | {l['sd']:.4f} | {l['loglik'] + sat:.3f} | "
              f"{l['seconds']:.2f} |")


if __name__ == "__main__":
    main()
