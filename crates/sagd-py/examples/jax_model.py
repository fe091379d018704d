"""Your model written with JAX for `sagd.fit`: write log p(x_i, z; theta) for ONE point, and let
`vmap` vectorise it over a block of chains, `grad` differentiate it and `jit` compile it.

Run: python crates/sagd-py/examples/jax_model.py   (needs `pip install jax`)

The model is the Poisson GLMM of examples/glmm.py (50 groups of 8 counts, a random intercept per
group), so the two fits can be compared.
"""

import numpy as np

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln

# sagd works in float64; JAX computes in float32 unless told otherwise.
jax.config.update("jax_enable_x64", True)


def jax_model(log_p_one, data):
    """`f(theta, points, z)` for `sagd.fit` from `log_p_one(theta, x_i, z_i) -> float`.

    `data` holds every point's data as arrays whose first axis is the point (a dict or tuple of
    arrays is fine); `points` picks the block's rows from them.
    """
    data = jax.tree_util.tree_map(jnp.asarray, data)

    def total(theta, points, z, real):
        # One value per row; their sum's gradient in theta is the block's grad_theta, and in z
        # each row's own gradient (the rows do not interact). Padding rows weigh 0.
        x = jax.tree_util.tree_map(lambda a: a[points], data)
        logp = jax.vmap(log_p_one, in_axes=(None, 0, 0))(theta, x, z)
        return jnp.sum(jnp.where(real, logp, 0.0)), logp

    step = jax.jit(jax.value_and_grad(total, argnums=(0, 2), has_aux=True))

    def f(theta, points, z):
        # sagd's blocks come in many sizes; padded to a power of two, each size compiles once.
        m = len(points)
        size = max(8, 1 << (m - 1).bit_length())
        pts = np.zeros(size, dtype=points.dtype)
        pts[:m] = points
        zz = np.zeros((size, z.shape[1]))
        zz[:m] = z
        (_, logp), (grad_theta, grad_z) = step(theta, pts, zz, np.arange(size) < m)
        return np.asarray(logp)[:m], np.asarray(grad_z)[:m], np.asarray(grad_theta)

    return f


def poisson_intercept_one(theta, point, z):
    """log p(y_j, u_j; theta) of one group: theta = (b0, b1, log sd), u_j its standardised
    intercept, y_j | u_j ~ Poisson(exp(b0 + b1 x + sd u_j)), u_j ~ N(0, 1)."""
    y, x = point
    eta = theta[0] + theta[1] * x + jnp.exp(theta[2]) * z[0]
    return (jnp.sum(y * eta - jnp.exp(eta) - gammaln(y + 1))
            - 0.5 * z[0] ** 2 - 0.5 * jnp.log(2 * jnp.pi))


if __name__ == "__main__":
    import time

    import sagd

    rng = np.random.default_rng(1)
    g = np.repeat(np.arange(50), 8)
    x = rng.normal(size=400)
    y = rng.poisson(np.exp(0.5 + 0.3 * x + rng.normal(scale=0.5, size=50)[g])).astype(float)

    f = jax_model(poisson_intercept_one, (y.reshape(50, 8), x.reshape(50, 8)))
    t = time.perf_counter()
    r = sagd.fit(f, [0.0, 0.0, np.log(0.5)], n_points=50, latent_dim=1, seed=1,
                 names=["(Intercept)", "x", "log sd"])
    print(r)
    print(f"({time.perf_counter() - t:.2f} s)")
