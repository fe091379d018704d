"""sagd.glmm against R's lme4 and glmmTMB on the same data, in one run: the suite of models lme4
fits (random intercepts of the three families, correlated random slopes, crossed Gaussian
factors, 10^5 groups) and two crossed binary designs where the Laplace approximation is not
exact (a dense one, and the salamander mating design, with 6 outcomes per level).

For every tool it prints the estimates, their standard errors, the exact log-likelihood at the
tool's own estimate (sagd.glmm_loglik: quadrature or the closed form; importance sampling, with
its error, where neither applies), that estimate's gap below the best of them, and the median
seconds of REPS fits (sagd with all cores and with one thread; lme4 and glmmTMB use one). sagd's
seconds are the fit's with `ranef_draws=0`, as glmer's include only its conditional modes; where
the default would sample the conditional means (crossed factors), their extra median time
follows.

Run: python crates/sagd-py/bench/lme4.py [--reps 3] [--out table.md] [--quick] [--only NAMES]
R is optional: without Rscript, or without lme4 or glmmTMB (Debian: r-cran-lme4,
r-cran-glmmtmb), the table has sagd's rows and says what was missing.
"""

import argparse
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import sagd  # noqa: E402
from conftest import simulate  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def slopes(family, groups, per, seed, trials=5):
    """Correlated random intercepts and slopes (sds 0.5, 0.3; cor 0.6); Poisson, binomial with
    `trials` trials, or Gaussian (sigma 0.8)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(groups), per)
    x = rng.normal(size=groups * per)
    S = np.array([[0.25, 0.09], [0.09, 0.09]])
    b = rng.multivariate_normal([0, 0], S, size=groups)
    eta = 0.5 + 0.3 * x + b[g, 0] + b[g, 1] * x
    if family == "poisson":
        y = rng.poisson(np.exp(eta)).astype(float)
    elif family == "binomial":
        y = rng.binomial(trials, 1 / (1 + np.exp(-eta))).astype(float)
    else:
        y = eta + rng.normal(scale=0.8, size=eta.shape)
    return y, x, g


def crossed(family, a, b, seed, sd_a=0.7, sd_b=0.4):
    """Crossed intercepts, every level of g meeting every level of h once."""
    rng = np.random.default_rng(seed)
    g, h = np.repeat(np.arange(a), b), np.tile(np.arange(b), a)
    x = rng.normal(size=a * b)
    eta = (0.5 + 0.5 * x + rng.normal(scale=sd_a, size=a)[g]
           + rng.normal(scale=sd_b, size=b)[h])
    if family == "gaussian":
        y = eta + rng.normal(scale=0.5, size=a * b)
    else:
        y = (rng.random(a * b) < 1 / (1 + np.exp(-eta))).astype(float)
    return y, x, g, h


def sparse_crossed(experiments, per_side, mates, seed, sd_f=1.5, sd_m=1.3):
    """The salamander mating design (McCullagh and Nelder): in each experiment `per_side`
    females and as many males, each female paired with `mates` males and each male with as many
    females; one binary outcome per pair, x a 0/1 covariate of the pair; crossed female and male
    intercepts with large variances. Every level has only `mates` observations."""
    rng = np.random.default_rng(seed)
    f, m = [], []
    for e in range(experiments):
        for i in range(per_side):
            for k in range(mates):
                f.append(e * per_side + i)
                m.append(e * per_side + (i + k) % per_side)
    g, h = np.array(f), np.array(m)
    x = (rng.random(len(g)) < 0.5).astype(float)
    n_levels = experiments * per_side
    eta = (0.5 - 1.0 * x + rng.normal(scale=sd_f, size=n_levels)[g]
           + rng.normal(scale=sd_m, size=n_levels)[h])
    y = (rng.random(len(g)) < 1 / (1 + np.exp(-eta))).astype(float)
    return y, x, g, h


def suite(quick):
    """(model, data columns, sagd.glmm's arguments)."""
    out = []
    for name, family, groups, per in [("poisson-50x8", "poisson", 50, 8),
                                      ("poisson-1000x8", "poisson", 1000, 8),
                                      ("bernoulli-60x8", "binomial", 60, 8),
                                      ("gaussian-100000x10", "gaussian", 100000, 10)]:
        if quick and groups > 1000:
            continue
        y, X, g = simulate(family, groups=groups, per=per)
        out.append((name, {"y": y, "x": X[:, 1], "g": g}, dict(family=family, groups=g)))
    for name, family, groups, per, seed in [("pslopes-60x8", "poisson", 60, 8, 11),
                                            ("bslopes-80x6", "binomial", 80, 6, 13),
                                            ("gslopes-40x10", "gaussian", 40, 10, 14),
                                            ("gslopes-40x10-reml", "gaussian", 40, 10, 14)]:
        y, x, g = slopes(family, groups, per, seed)
        cols = {"y": y, "x": x, "g": g}
        kw = dict(family=family, groups=g, Z=np.column_stack([np.ones_like(x), x]),
                  correlated=True, reml=name.endswith("reml"))
        if family == "binomial":
            cols["trials"] = np.full_like(y, 5.0)
            kw["trials"] = cols["trials"]
        out.append((name, cols, kw))
    y, x, g, h = crossed("gaussian", 20, 15, 12)
    out.append(("crossed-20x15", {"y": y, "x": x, "g": g, "h": h},
                dict(family="gaussian", groups={"g": g, "h": h})))
    # Binary outcomes, large variances, crossed: where Laplace is biased and sagd runs EM.
    y, x, g, h = crossed("binomial", 30, 20, 21, sd_a=1.5, sd_b=1.0)
    out.append(("bcrossed-30x20", {"y": y, "x": x, "g": g, "h": h},
                dict(family="binomial", groups={"g": g, "h": h})))
    # Subjects × items as psycholinguists cross them: 2,400 binary outcomes, moderate variances.
    y, x, g, h = crossed("binomial", 60, 40, 21, sd_a=1.0, sd_b=0.8)
    out.append(("bcrossed-60x40", {"y": y, "x": x, "g": g, "h": h},
                dict(family="binomial", groups={"g": g, "h": h})))
    # The salamander design: 6 binary outcomes per level, large variances.
    y, x, g, h = sparse_crossed(3, 20, 6, 31)
    out.append(("bsparse-3x20x6", {"y": y, "x": x, "g": g, "h": h},
                dict(family="binomial", groups={"g": g, "h": h})))
    return out


def theta_of(fit, kw):
    """A tool's estimate on sagd's scale: beta; per factor log diag L and L's off-diagonal
    (L = chol of its covariance); log sigma."""
    theta = list(fit["beta"])
    correlated = kw.get("correlated", False)
    for term in fit["terms"]:
        sd = np.array(term["sd"])
        if len(sd) > 1 and correlated:
            # L of [[s0², c s0 s1], [c s0 s1, s1²]], also at |c| = 1 (a singular fit).
            c = term["cor"] if term["cor"] is not None else 0.0
            l11 = sd[1] * np.sqrt(max(1.0 - c * c, 0.0))
            theta += [np.log(max(sd[0], 1e-300)), np.log(max(l11, 1e-300)), c * sd[1]]
        else:
            theta += list(np.log(np.maximum(sd, 1e-300)))
    if fit["sigma"] is not None:
        theta.append(np.log(fit["sigma"]))
    return np.array(theta)


def sagd_row(r, secs, secs1):
    terms, at = [], 0
    sds = list(r.random_sd)
    for cor in r.random_cor:
        q = cor.shape[0]
        terms.append({"sd": sds[at:at + q], "cor": cor[1, 0] if q > 1 else None})
        at += q
    return {"tool": "sagd", "beta": list(r.fixed), "se": list(r.fixed_se), "terms": terms,
            "sigma": r.sigma, "seconds": secs, "seconds_1": secs1, "method": r.method,
            "loglik": r.reml_loglik if r.reml else r.loglik,
            "estimate": r.estimate}


def median_time(f, reps):
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return out, float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="fits per tool and model (median)")
    ap.add_argument("--out", help="also write the table to this Markdown file")
    ap.add_argument("--quick", action="store_true", help="leave out the 10^5-group model")
    ap.add_argument("--only", help="fit only the models whose names start with one of these "
                    "(comma-separated), e.g. bcrossed,bsparse")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    models = suite(args.quick)
    if args.only:
        models = [m for m in models if m[0].startswith(tuple(args.only.split(",")))]
    rows = {}
    r_out = []
    rscript = shutil.which("Rscript")
    notes = []
    if rscript is None:
        notes.append("Rscript not found: lme4 and glmmTMB were not run (Debian: r-base-core, "
                     "r-cran-lme4, r-cran-glmmtmb)")
    for name, cols, kw in models:
        # sagd, then R on the same file, model by model: one sitting, alternating.
        y = cols["y"]
        X = np.column_stack([np.ones_like(cols["x"]), cols["x"]])
        call = dict(kw)
        groups = call.pop("groups")
        # The fit alone against glmer's (whose ranef gives modes only); where the default would
        # sample the conditional means (crossed factors), their extra time is timed apart.
        fit = lambda threads, draws=0: sagd.glmm(y, X, groups, seed=1, threads=threads,
                                                 x_names=["(Intercept)", "x"], ranef_draws=draws,
                                                 **call)
        r, secs = median_time(lambda: fit(None), args.reps)
        _, secs1 = median_time(lambda: fit(1), args.reps)
        rows[name] = [sagd_row(r, secs, secs1)]
        if r.ranef is not None and r.ranef_mean is None:
            default = inspect.signature(sagd.glmm).parameters["ranef_draws"].default
            _, with_means = median_time(lambda: fit(None, default), args.reps)
            rows[name][0]["means_seconds"] = with_means - secs
        if rscript:
            path = os.path.join(tmp, f"data-{name}.csv")
            np.savetxt(path, np.column_stack(list(cols.values())), delimiter=",",
                       header=",".join(cols), comments="", fmt="%.17g")
            out = subprocess.run([rscript, os.path.join(HERE, "lme4.R"), str(args.reps), path],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                notes.append(f"{name}: R failed: {out.stderr.strip().splitlines()[-1:]}")
            r_out += out.stdout.strip().splitlines()
    for line in r_out:
        rec = json.loads(line)
        if "tools" in rec:
            missing = [t for t, ok in rec["tools"].items() if not ok]
            if missing:
                notes.append(f"R has no {', '.join(missing)}: not run")
            continue
        name = rec["file"].rsplit("data-", 1)[1][:-4]
        rows[name].append(rec)
    lines = table(models, rows)
    head = (f"sagd {sagd.__version__}; {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores; median of {args.reps} fits")
    text = "\n".join([head, ""] + [f"- {n}" for n in notes] + [""] + lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


def table(models, rows):
    lines = ["| model | tool | (Intercept) (se) | x (se) | random-effect sds (cor) | sigma | "
             "exact ℓ at the estimate | below the best | seconds | sagd's time / tool's |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, cols, kw in models:
        y = cols["y"]
        X = np.column_stack([np.ones_like(cols["x"]), cols["x"]])
        call = {k: v for k, v in kw.items() if k in ("family", "Z", "trials", "correlated")}
        reml = kw.get("reml", False)
        evaluated = []
        for rec in rows[name]:
            th = rec["estimate"] if rec["tool"] == "sagd" else theta_of(rec, kw)
            if reml:
                evaluated.append((None, 0.0, ""))  # REML criteria compare by their own values
                continue
            evaluated.append(sagd.glmm_loglik(th, y, X, kw["groups"], seed=1, **call))
        best = max((v for v, _, _ in evaluated if v is not None), default=None)
        sagd_secs = rows[name][0]["seconds"]
        for rec, (ll, err, how) in zip(rows[name], evaluated):
            sds = "; ".join(", ".join(f"{s:.4f}" for s in t["sd"])
                            + (f" ({t['cor']:.3f})" if t["cor"] is not None else "")
                            for t in rec["terms"])
            sigma = "" if rec["sigma"] is None else f"{rec['sigma']:.4f}"
            if ll is None:
                lcell = (f"REML {rec['loglik']:.4f}" if "loglik" in rec
                         else "REML (see sagd.glmm)")
                gap = ""
            else:
                lcell = f"{ll:.4f}" + (f" ± {err:.4f}" if err else "")
                gap = f"{best - ll:.4f}"
            if rec["tool"] == "sagd":
                secs = f"{rec['seconds']:.3f} ({rec['seconds_1']:.3f} on 1 thread)"
                if "means_seconds" in rec:
                    secs += f"; +{rec['means_seconds']:.3f} for the sampled conditional means"
                ratio = f"sagd ran {rec['method']}"
            else:
                secs = f"{rec['seconds']:.3f}"
                ratio = f"{sagd_secs / rec['seconds']:.2f} ({rows[name][0]['seconds_1'] / rec['seconds']:.2f} on 1 thread)"
            b, s = rec["beta"], rec["se"]
            lines.append(f"| {name} | {rec['tool']} | {b[0]:.4f} ({s[0]:.4f}) | "
                         f"{b[1]:.4f} ({s[1]:.4f}) | {sds} | {sigma} | {lcell} | {gap} | "
                         f"{secs} | {ratio} |")
    return lines


if __name__ == "__main__":
    main()
