"""The JAX recipe of examples/jax_model.py (run where JAX is installed, as in CI): its gradients
against the model written by hand, and its fit against the built-in GLMM's."""

import pathlib
import sys

import numpy as np
import pytest

pytest.importorskip("jax")

import sagd  # noqa: E402
from models import poisson_intercept  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from jax_model import jax_model, poisson_intercept_one  # noqa: E402


def recipe(y, X, g):
    groups = np.unique(g)
    per = len(y) // len(groups)
    return jax_model(poisson_intercept_one, (y.reshape(-1, per), X[:, 1].reshape(-1, per)))


def test_the_jax_recipe_gives_the_hand_written_gradients(poisson_data):
    y, X, g = poisson_data
    by_hand, with_jax = poisson_intercept(y, X, g), recipe(y, X, g)
    rng = np.random.default_rng(0)
    for m in (1, 7, 50, 130):
        theta = rng.normal(scale=0.3, size=3)
        points = rng.integers(0, 50, size=m)
        z = rng.normal(size=(m, 1))
        for a, b in zip(by_hand(theta, points, z), with_jax(theta, points, z)):
            assert np.asarray(b).shape == np.asarray(a).shape
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-9)


def test_a_jax_model_fits_as_the_built_in_one(poisson_data):
    y, X, g = poisson_data
    built_in = sagd.glmm(y, X, g, family="poisson", seed=3)
    own = sagd.fit(recipe(y, X, g), [0.0, 0.0, np.log(0.5)], n_points=50, latent_dim=1, seed=3)
    assert own.status == "polished", own
    tol = 4 * np.hypot(own.mc_se, built_in.mc_se)
    assert np.all(np.abs(own.estimate - built_in.estimate) < tol), (own, built_in)
