"""A Poisson random-intercept model written as a Python function for `sagd.fit`: the same model
as the built-in `sagd.glmm(..., family="poisson")`, vectorised over a block of chains."""

import numpy as np
from scipy.special import gammaln

LN_2PI = np.log(2 * np.pi)


def poisson_intercept(y, X, g):
    """f(theta, points, z) for theta = (beta, log tau), groups of equal size."""
    groups = np.unique(g)
    Y = np.stack([y[g == j] for j in groups])  # (G, m)
    XX = np.stack([X[g == j] for j in groups])  # (G, m, p)
    const = -gammaln(Y + 1).sum(axis=1) - 0.5 * LN_2PI

    def f(theta, points, z):
        p = XX.shape[2]
        beta, tau = theta[:p], np.exp(theta[p])
        u = z[:, 0]
        eta = XX[points] @ beta + tau * u[:, None]  # (rows, m)
        mu = np.exp(eta)
        yy = Y[points]
        logp = (yy * eta - mu).sum(axis=1) + const[points] - 0.5 * u * u
        d = yy - mu
        grad_z = (d.sum(axis=1) * tau - u)[:, None]
        grad_beta = np.einsum("rm,rmp->p", d, XX[points])
        grad_log_tau = (d.sum(axis=1) * tau * u).sum()
        return logp, grad_z, np.r_[grad_beta, grad_log_tau]

    return f
