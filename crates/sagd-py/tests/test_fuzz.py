"""Property-based tests of the Python entry points (hypothesis, bounded in examples and time):
whatever the arguments, a result or a ValueError / TypeError that names the problem; never a
crash, a hang, a panic or another exception."""

import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import sagd  # noqa: E402
from test_minimize import mean_problem  # noqa: E402

BOUNDED = settings(max_examples=150, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow])

# Numbers a user might pass, the awkward ones included.
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(min_value=-10**20, max_value=10**20),
    st.sampled_from([0, 1, -1, 0.5, 1e-300, 5e-324, 1e300, np.float32(0.5), np.int64(3), True]),
)
anything = st.one_of(numbers, st.none(), st.text(max_size=5), st.lists(numbers, max_size=3))
# Settings of a run, kept to sizes that end quickly when valid (K_t = c2·t^(2c) steps: a c2 of
# 1e20 is a valid request for a run that does not end), the awkward values included.
small = st.one_of(
    st.floats(min_value=-3, max_value=3),
    st.sampled_from([0, -1, math.nan, math.inf, -math.inf, 1e-300, np.float32(0.5), True, "1"]),
)


class Broke(Exception):
    """What the user's function raises: the run must give it back as itself."""


def broken(*_):
    raise Broke("the user's function")


@st.composite
def offsets(draw, n):
    """None, or an offset of n values (a user's logs of exposures), with awkward values and
    lengths mixed in."""
    return draw(st.one_of(st.none(), st.lists(st.floats(-3, 3), min_size=n, max_size=n),
                          st.lists(st.one_of(st.floats(-3, 3), numbers), min_size=n,
                                   max_size=n + 1)))


@st.composite
def mixed_model_data(draw):
    """Data of one length n (mostly counts, groups, covariates and offsets a user would have),
    with awkward values and lengths mixed in."""
    n = draw(st.integers(0, 12))
    if draw(st.booleans()):
        # What a user would have: counts, a few groups, a covariate.
        y = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
        groups = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        x = draw(st.one_of(st.none(), st.lists(st.floats(-3, 3), min_size=n, max_size=n)))
        return y, groups, x, draw(offsets(n))
    y = draw(st.lists(st.one_of(st.integers(0, 30), numbers), min_size=n, max_size=n))
    groups = draw(st.lists(st.one_of(st.integers(0, 3), st.sampled_from(["a", None, np.nan])),
                           min_size=n, max_size=n + draw(st.integers(0, 1))))
    x = draw(st.one_of(st.none(), st.lists(st.one_of(st.floats(-3, 3), numbers),
                                            min_size=n, max_size=n)))
    return y, groups, x, draw(offsets(n))


@BOUNDED
@given(
    data=mixed_model_data(),
    family=st.sampled_from(["poisson", "binomial", "gaussian", "gamma", 3]),
    seed=st.one_of(st.integers(0, 5), anything),
    threads=st.one_of(st.none(), st.integers(-2, 4), numbers),
)
def test_glmm_gives_a_fit_or_names_the_problem(data, family, seed, threads):
    y, groups, x, offset = data
    X = None if x is None else np.column_stack([np.ones(len(x)), np.asarray(x, dtype=float)])
    try:
        r = sagd.glmm(np.asarray(y, dtype=float), X, np.asarray(groups, dtype=object),
                      family=family, seed=seed, threads=threads, offset=offset)
    except (ValueError, TypeError) as e:
        assert str(e), "an error without a message"
        return
    assert np.all(np.isfinite(r.estimate[:-1])), r


@BOUNDED
@given(
    c1=small, c2=small, c=small, alpha0=small,
    iterations=st.one_of(st.integers(-1, 5), st.sampled_from([2.5, math.nan, "3", None])),
    scheme=st.sampled_from(["baoab", "euler", "obabo", "ubu", "leapfrog", ""]),
    schedule=st.sampled_from(["theorem3", "theorem4", "constant", "x"]),
    chain_length=st.one_of(st.none(), st.integers(-1, 3), small),
)
def test_minimize_gives_a_path_or_names_the_problem(c1, c2, c, alpha0, iterations, scheme,
                                                    schedule, chain_length):
    try:
        r = sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((2, 2)), iterations=iterations,
                          schedule=schedule, c1=c1, c2=c2, c=c, alpha0=alpha0, step_size=c1,
                          chain_length=chain_length, learning_rate=alpha0, scheme=scheme, seed=1)
    except (ValueError, TypeError, OverflowError) as e:
        assert str(e), "an error without a message"
        return
    # A run that ends is one whose every iterate is finite, or one that stopped on a divergence.
    assert r.stopped or np.all(np.isfinite(r.path)), r


@BOUNDED
@given(n_points=anything, latent_dim=anything, seed=anything, threads=anything,
       theta0=st.one_of(st.lists(numbers, max_size=3), anything))
def test_fit_refuses_bad_arguments_before_calling_the_function(n_points, latent_dim, seed,
                                                               threads, theta0):
    # Arguments that pass reach the function, which raises: so every outcome is that
    # exception or a ValueError / TypeError about the arguments.
    try:
        sagd.fit(broken, theta0, n_points=n_points, latent_dim=latent_dim, seed=seed,
                 threads=threads)
    except Broke:
        pass
    except (ValueError, TypeError, OverflowError) as e:
        assert str(e), "an error without a message"
    else:
        pytest.fail("a fit whose function always raises returned")
