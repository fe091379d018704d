# Fits the CSV files written by lme4.py with lme4 and prints one JSON object per model: fixed
# effects, their standard errors, the random effects' sds (and the slopes' correlation), the
# log-likelihood, seconds. The model is named by the file: data-<model>.csv.
suppressPackageStartupMessages(library(lme4))
args <- commandArgs(trailingOnly = TRUE)
for (file in args) {
  d <- read.csv(file)
  model <- sub(".*-(\\w+)\\.csv$", "\\1", file)
  t <- system.time({
    m <- switch(model,
      gaussian = lmer(y ~ x + (1 | g), data = d, REML = FALSE),
      poisson = glmer(y ~ x + (1 | g), data = d, family = poisson, nAGQ = 25),
      binomial = glmer(y ~ x + (1 | g), data = d, family = binomial, nAGQ = 25),
      slopes = glmer(y ~ x + (1 + x | g), data = d, family = poisson),
      crossed = lmer(y ~ x + (1 | g) + (1 | h), data = d, REML = FALSE)
    )
  })[["elapsed"]]
  fe <- fixef(m)
  se <- sqrt(diag(as.matrix(vcov(m))))
  vc <- as.data.frame(VarCorr(m))
  sds <- vc$sdcor[is.na(vc$var2) & vc$grp != "Residual"]
  cors <- vc$sdcor[!is.na(vc$var2)]
  cat(sprintf('{"file": "%s", "beta": [%.6f, %.6f], "se": [%.6f, %.6f], "sd": [%s], "cor": [%s], "loglik": %.6f, "seconds": %.3f}\n',
              file, fe[1], fe[2], se[1], se[2], paste(sprintf("%.6f", sds), collapse = ", "),
              paste(sprintf("%.6f", cors), collapse = ", "), as.numeric(logLik(m)), t))
}
