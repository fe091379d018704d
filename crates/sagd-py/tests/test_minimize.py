"""Algorithm 1 from Python on a convex problem with a known optimum: F(theta) = E ||theta - xi||^2/2
with xi ~ N(mu, I) has its minimum at theta* = mu (the README's and the crate's first example)."""

import numpy as np
import pytest

import sagd

MU = np.array([3.0, -1.0])


def mean_problem(theta, xi):
    logp = -0.5 * ((xi - MU) ** 2).sum(axis=1)
    grad_xi = MU - xi
    grad_f = (theta[None, :] - xi).sum(axis=0)
    return logp, grad_xi, grad_f


def test_theorem3_finds_the_mean():
    r = sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((4, 2)), iterations=300,
                      c1=0.2, c2=2.0, alpha0=1.0, seed=1)
    # The averaged iterate of Theorem 3: over 8 seeds it was 0.024 and 0.007 from mu on average
    # (the early iterates' pull) with a spread of 0.021 and 0.015; within 0.1 is 4 spreads more.
    assert np.all(np.abs(r.theta_avg - MU) < 0.1), r.theta_avg
    assert r.path.shape == (301, 2)
    assert len(r.grad_norms) == 300 and not r.stopped


def test_the_same_seed_gives_the_same_path_on_any_number_of_threads():
    a = sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((4, 2)), iterations=30, seed=3, threads=1)
    b = sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((4, 2)), iterations=30, seed=3, threads=2)
    assert np.array_equal(a.path, b.path)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="xi0"):
        sagd.minimize(mean_problem, [0.0, 0.0], np.zeros(2))
    with pytest.raises(ValueError, match="schedule='constant' needs"):
        sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((1, 2)), schedule="constant")
    with pytest.raises(ValueError, match="unknown scheme"):
        sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((1, 2)), scheme="leapfrog")
    with pytest.raises(ValueError, match="grad_f with 1 values; expected 2"):
        sagd.minimize(lambda t, x: (mean_problem(t, x)[0], mean_problem(t, x)[1], [0.0]),
                      [0.0, 0.0], np.zeros((1, 2)), iterations=2)


def test_a_transposed_gradient_is_refused_by_name():
    # The issue: grad_xi of shape (d, m) for (m, d) has the right length, and minimize returned
    # theta near 1e51 without an error.
    def transposed(theta, xi):
        logp, grad_xi, grad_f = mean_problem(theta, xi)
        return logp, grad_xi.T.copy(), grad_f

    with pytest.raises(ValueError, match=r"grad_xi of shape \(2, 4\); expected \(4, 2\)"):
        sagd.minimize(transposed, [0.0, 0.0], np.zeros((4, 2)), iterations=5, seed=1)


def test_settings_that_ask_for_no_langevin_steps_are_refused():
    # The issue: c2=0 (K_t = 0) and chain_length=0 or NaN ran anyway, with one step.
    with pytest.raises(ValueError, match="K_t = 0"):
        sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((4, 2)), iterations=5, c2=0.0)
    for k in (0, float("nan"), 2.5):
        with pytest.raises(ValueError, match="chain_length"):
            sagd.minimize(mean_problem, [0.0, 0.0], np.zeros((4, 2)), iterations=5,
                          schedule="constant", step_size=0.1, chain_length=k, learning_rate=0.1)


def test_a_function_that_turns_non_finite_stops_the_run_naming_the_output_and_call():
    # The issue: NaN from call 51 on, and minimize ended normally with a biased theta.
    def after(k, output):
        calls = [0]

        def f(theta, xi):
            calls[0] += 1
            out = list(mean_problem(theta, xi))
            if calls[0] > k:
                out[output] = out[output] * np.nan
            return tuple(out)
        return f

    with pytest.raises(ValueError, match=r"grad_f with a value that is not finite \(NaN\) at call 51"):
        sagd.minimize(after(50, 2), [0.0, 0.0], np.zeros((4, 2)), iterations=100, seed=1)
    with pytest.raises(ValueError, match=r"logp that is not finite .* \(since call 51\)"):
        sagd.minimize(after(50, 0), [0.0, 0.0], np.zeros((4, 2)), iterations=100, seed=1)
