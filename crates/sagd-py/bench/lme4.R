# Fits the CSV files written by lme4.py with lme4 and prints one JSON object per model:
# fixed effects, their standard errors, the random intercept's sd, the log-likelihood, seconds.
suppressPackageStartupMessages(library(lme4))
args <- commandArgs(trailingOnly = TRUE)
for (file in args) {
  d <- read.csv(file)
  family <- sub(".*-(\\w+)\\.csv$", "\\1", file)
  t <- system.time({
    m <- if (family == "gaussian") {
      lmer(y ~ x + (1 | g), data = d, REML = FALSE)
    } else if (family == "poisson") {
      glmer(y ~ x + (1 | g), data = d, family = poisson, nAGQ = 25)
    } else {
      glmer(y ~ x + (1 | g), data = d, family = binomial, nAGQ = 25)
    }
  })[["elapsed"]]
  fe <- fixef(m)
  se <- sqrt(diag(as.matrix(vcov(m))))
  sd <- attr(VarCorr(m)$g, "stddev")[[1]]
  cat(sprintf('{"file": "%s", "beta": [%.6f, %.6f], "se": [%.6f, %.6f], "sd": %.6f, "loglik": %.6f, "seconds": %.3f}\n',
              file, fe[1], fe[2], se[1], se[2], sd, as.numeric(logLik(m)), t))
}
