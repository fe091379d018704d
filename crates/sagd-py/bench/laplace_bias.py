"""Where Laplace's approximation is biased: the salamander mating design (crossed female and male
intercepts, 6 binary outcomes per animal, large variances), simulated SEEDS times at known
parameters and fitted by sagd (exact maximum likelihood, automated EM with Langevin chains),
glmer (Laplace, lme4's only choice with crossed factors) and glmmTMB (Laplace). Every estimate is
put on the exact likelihood (importance sampling at each block's mode, sagd.glmm_loglik, the
same draws for every tool), so that each tool's distance below the maximum is measured.

Run: python crates/sagd-py/bench/laplace_bias.py [--seeds 10] [--out table.md]
R with lme4 and glmmTMB is needed for the comparison (Debian: r-cran-lme4, r-cran-glmmtmb).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sagd  # noqa: E402
from lme4 import HERE, sparse_crossed, theta_of  # noqa: E402

TRUTH = {"(Intercept)": 0.5, "x": -1.0, "sd female": 1.5, "sd male": 1.3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="simulated data sets")
    ap.add_argument("--out", help="also write the table to this Markdown file")
    args = ap.parse_args()
    rscript = shutil.which("Rscript")
    if rscript is None:
        sys.exit("Rscript not found: this comparison needs R with lme4 and glmmTMB")
    tmp = tempfile.mkdtemp()
    data, rows = {}, {}
    for seed in range(1, args.seeds + 1):
        y, x, g, h = sparse_crossed(3, 20, 6, 100 + seed)
        name = f"bsparse-s{seed}"
        data[name] = (y, x, g, h)
        X = np.column_stack([np.ones_like(x), x])
        t = time.perf_counter()
        r = sagd.glmm(y, X, {"g": g, "h": h}, family="binomial", seed=1,
                      x_names=["(Intercept)", "x"])
        secs = time.perf_counter() - t
        rows[name] = [{"tool": "sagd", "theta": r.estimate, "beta": list(r.fixed),
                       "sd": list(r.random_sd), "seconds": secs, "status": r.status}]
        np.savetxt(os.path.join(tmp, f"data-{name}.csv"), np.column_stack([y, x, g, h]),
                   delimiter=",", header="y,x,g,h", comments="", fmt="%.17g")
    files = [os.path.join(tmp, f"data-{n}.csv") for n in data]
    out = subprocess.run([rscript, os.path.join(HERE, "lme4.R"), "1"] + files,
                         capture_output=True, text=True, check=True)
    for line in out.stdout.strip().splitlines():
        rec = json.loads(line)
        if "tools" in rec:
            continue
        name = rec["file"].rsplit("data-", 1)[1][:-4]
        kw = {"correlated": False}
        rows[name].append({"tool": rec["tool"], "theta": theta_of(rec, kw), "beta": rec["beta"],
                           "sd": [t["sd"][0] for t in rec["terms"]],
                           "seconds": rec["seconds"], "status": ""})
    tools = [r["tool"] for r in rows[next(iter(rows))]]
    per = {t: {"beta0": [], "beta1": [], "sdf": [], "sdm": [], "gap": [], "secs": []}
           for t in tools}
    lines = ["| data set | tool | (Intercept) | x | sd female | sd male | exact ℓ at the estimate "
             "| below the best | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for name, (y, x, g, h) in data.items():
        X = np.column_stack([np.ones_like(x), x])
        lls = [sagd.glmm_loglik(r["theta"], y, X, {"g": g, "h": h}, family="binomial",
                                seed=1) for r in rows[name]]
        best = max(v for v, _, _ in lls)
        for r, (ll, err, _) in zip(rows[name], lls):
            p = per[r["tool"]]
            p["beta0"].append(r["beta"][0])
            p["beta1"].append(r["beta"][1])
            p["sdf"].append(r["sd"][0])
            p["sdm"].append(r["sd"][1])
            p["gap"].append(best - ll)
            p["secs"].append(r["seconds"])
            lines.append(f"| {name} | {r['tool']} | {r['beta'][0]:.4f} | {r['beta'][1]:.4f} | "
                         f"{r['sd'][0]:.4f} | {r['sd'][1]:.4f} | {ll:.4f} ± {err:.4f} | "
                         f"{best - ll:.4f} | {r['seconds']:.3f} |")
    summary = ["| tool | mean (Intercept) | mean x | mean sd female | mean sd male | "
               "mean below the best (max) | median seconds |", "|---|---|---|---|---|---|---|",
               f"| truth | {TRUTH['(Intercept)']} | {TRUTH['x']} | {TRUTH['sd female']} | "
               f"{TRUTH['sd male']} | | |"]
    for t in tools:
        p = per[t]
        summary.append(f"| {t} | {np.mean(p['beta0']):.4f} | {np.mean(p['beta1']):.4f} | "
                       f"{np.mean(p['sdf']):.4f} | {np.mean(p['sdm']):.4f} | "
                       f"{np.mean(p['gap']):.4f} ({np.max(p['gap']):.4f}) | "
                       f"{np.median(p['secs']):.3f} |")
    text = "\n".join([f"{args.seeds} data sets; sagd {sagd.__version__}; {os.cpu_count()} cores",
                      ""] + summary + [""] + lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
