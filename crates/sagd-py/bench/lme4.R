# Fits the CSV files written by lme4.py with lme4 and glmmTMB (each where installed) and prints
# one JSON object per model and tool: fixed effects and their standard errors, each grouping
# factor's sds and correlation, sigma, the tool's own log-likelihood and the median seconds of
# `reps` fits. The model is named by the file: data-<model>.csv; its formula, family and method
# are below. Usage: Rscript lme4.R REPS FILE...
args <- commandArgs(trailingOnly = TRUE)
reps <- as.integer(args[1])
files <- args[-1]
have <- function(pkg) suppressWarnings(suppressPackageStartupMessages(
  requireNamespace(pkg, quietly = TRUE)))
tools <- c(lme4 = have("lme4"), glmmTMB = have("glmmTMB"))
cat(sprintf('{"tools": {"lme4": %s, "glmmTMB": %s}}\n', tolower(tools[["lme4"]]),
            tolower(tools[["glmmTMB"]])))
if (tools[["lme4"]]) suppressPackageStartupMessages(library(lme4))
if (tools[["glmmTMB"]]) suppressPackageStartupMessages(library(glmmTMB))

spec <- function(model) {
  # formula, family, lme4's nAGQ (25 where glmer allows it: one scalar random effect), REML
  slopes <- y ~ x + (1 + x | g)
  switch(sub("-.*", "", model),
    poisson = list(y ~ x + (1 | g), "poisson", 25, FALSE),
    bernoulli = list(y ~ x + (1 | g), "binomial", 25, FALSE),
    pslopes = list(slopes, "poisson", 1, FALSE),
    bslopes = list(cbind(y, trials - y) ~ x + (1 + x | g), "binomial", 1, FALSE),
    gslopes = list(slopes, "gaussian", 0, grepl("reml", model)),
    gaussian = list(y ~ x + (1 | g), "gaussian", 0, FALSE),
    crossed = list(y ~ x + (1 | g) + (1 | h), "gaussian", 0, FALSE),
    bcrossed = list(y ~ x + (1 | g) + (1 | h), "binomial", 1, FALSE),
    bsparse = list(y ~ x + (1 | g) + (1 | h), "binomial", 1, FALSE)
  )
}

report <- function(file, tool, m, secs, fixed, se, vc, sigma, ll) {
  # vc: per grouping factor, its covariance matrix (in the formula's order of factors).
  terms <- vapply(vc, function(S) {
    sd <- sqrt(diag(S))
    cor <- if (nrow(S) > 1) S[2, 1] / (sd[1] * sd[2]) else NA
    sprintf('{"sd": [%s], "cor": %s}', paste(sprintf("%.10g", sd), collapse = ", "),
            if (is.na(cor)) "null" else sprintf("%.10g", cor))
  }, "")
  cat(sprintf(paste0('{"file": "%s", "tool": "%s", "beta": [%s], "se": [%s], "terms": [%s], ',
                     '"sigma": %s, "loglik": %.10g, "seconds": %.4f}\n'),
              file, tool, paste(sprintf("%.10g", fixed), collapse = ", "),
              paste(sprintf("%.10g", se), collapse = ", "), paste(terms, collapse = ", "),
              if (is.null(sigma)) "null" else sprintf("%.10g", sigma), ll, secs))
}

timed <- function(fit) {
  times <- numeric(reps)
  for (r in seq_len(reps)) times[r] <- system.time(m <- fit())[["elapsed"]]
  list(m = m, secs = median(times))
}

for (file in files) {
  d <- read.csv(file)
  model <- sub(".*data-(.*)\\.csv$", "\\1", file)
  s <- spec(model)
  f <- s[[1]]; fam <- s[[2]]; nagq <- s[[3]]; reml <- s[[4]]
  if (tools[["lme4"]]) {
    t <- timed(function() {
      if (fam == "gaussian") lmer(f, data = d, REML = reml)
      else glmer(f, data = d, family = fam, nAGQ = nagq)
    })
    m <- t$m
    vc <- lapply(VarCorr(m)[unique(c("g", "h")[c("g", "h") %in% names(VarCorr(m))])],
                 function(S) matrix(as.numeric(S), nrow(S)))
    report(file, "lme4", m, t$secs, fixef(m), sqrt(diag(as.matrix(vcov(m)))), vc,
           if (fam == "gaussian") sigma(m) else NULL, as.numeric(logLik(m)))
  }
  if (tools[["glmmTMB"]]) {
    t <- timed(function() glmmTMB(f, data = d, family = fam, REML = reml))
    m <- t$m
    cond <- VarCorr(m)$cond
    vc <- lapply(cond[intersect(c("g", "h"), names(cond))], function(S) matrix(as.numeric(S), nrow(S)))
    report(file, "glmmTMB", m, t$secs, fixef(m)$cond, sqrt(diag(vcov(m)$cond)), vc,
           if (fam == "gaussian") sigma(m) else NULL, as.numeric(logLik(m)))
  }
}
