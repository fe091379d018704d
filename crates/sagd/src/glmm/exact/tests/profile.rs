//! Profile intervals against the balanced one-way model's profiles, which reduce to one
//! dimension: ℓ(μ, τ², σ²) depends on the data through ȳ, SSB and SSW, and with λ = σ² + nτ²,
//! ℓ = c − a(n−1)/2 log σ² − SSW/(2σ²) − a/2 log λ − (SSB + an(ȳ − μ)²)/(2λ), λ ≥ σ².

use super::*;

/// The sums of a balanced one-way design: groups a, rows per group n, ȳ, SSB, SSW.
struct OneWay {
    a: f64,
    n: f64,
    mean: f64,
    ssb: f64,
    ssw: f64,
}

impl OneWay {
    fn of(y: &[f64], a: usize, n: usize) -> OneWay {
        let mean = y.iter().sum::<f64>() / y.len() as f64;
        let (mut ssb, mut ssw) = (0.0, 0.0);
        for g in y.chunks(n) {
            let m = g.iter().sum::<f64>() / n as f64;
            ssb += n as f64 * (m - mean).powi(2);
            ssw += g.iter().map(|v| (v - m).powi(2)).sum::<f64>();
        }
        OneWay {
            a: a as f64,
            n: n as f64,
            mean,
            ssb,
            ssw,
        }
    }

    /// ℓ less its constant at (μ, σ², λ).
    fn ell(&self, mu: f64, s2: f64, lambda: f64) -> f64 {
        let (a, n) = (self.a, self.n);
        let b = self.ssb + a * n * (self.mean - mu).powi(2);
        -0.5 * a * (n - 1.0) * s2.ln()
            - self.ssw / (2.0 * s2)
            - 0.5 * a * lambda.ln()
            - b / (2.0 * lambda)
    }

    /// max over σ² and λ ≥ σ² at μ: B = SSB + an(ȳ − μ)²; λ = B/a and σ² = SSW/(a(n−1)) where
    /// they keep λ ≥ σ², else λ = σ² = (SSW + B)/(an).
    fn at_mean(&self, mu: f64) -> f64 {
        let (a, n) = (self.a, self.n);
        let b = self.ssb + a * n * (self.mean - mu).powi(2);
        let (s2, lambda) = (self.ssw / (a * (n - 1.0)), b / a);
        if lambda >= s2 {
            self.ell(mu, s2, lambda)
        } else {
            let s2 = (self.ssw + b) / (a * n);
            self.ell(mu, s2, s2)
        }
    }

    /// max over λ ≥ σ² at σ² (μ = ȳ).
    fn at_sigma2(&self, s2: f64) -> f64 {
        self.ell(self.mean, s2, (self.ssb / self.a).max(s2))
    }

    /// max over σ² at τ² (μ = ȳ), by golden section in log σ².
    fn at_tau2(&self, t2: f64) -> f64 {
        let f = |l: f64| {
            let s2 = l.exp();
            self.ell(self.mean, s2, s2 + self.n * t2)
        };
        let (mut lo, mut hi) = (-20.0f64, 20.0f64);
        let r = 0.5 * (5.0f64.sqrt() - 1.0);
        for _ in 0..200 {
            let (c, d) = (hi - r * (hi - lo), lo + r * (hi - lo));
            if f(c) > f(d) {
                hi = d;
            } else {
                lo = c;
            }
        }
        f(0.5 * (lo + hi))
    }
}

/// Where `deviance` (0 at `from`, rising away from it) reaches `cut`, by bisection towards `to`.
fn crossing(deviance: impl Fn(f64) -> f64, from: f64, to: f64, cut: f64) -> f64 {
    let (mut lo, mut hi) = (from, to);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if deviance(mid) < cut {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The one-way model's intervals: the library's against bisection on the reduced profiles.
fn one_way_intervals(m: &Glmm, y: &[f64], a: usize, n: usize) {
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    let got = m.profile_intervals(&fit, 0.95).unwrap();
    let o = OneWay::of(y, a, n);
    let cut = 1.959_963_984_540_054f64.powi(2);
    let (mu, t, s) = (fit.theta[0], fit.theta[1].exp(), fit.theta[2].exp());
    let top = o.at_mean(o.mean);
    let dev = |v: f64| 2.0 * (top - v);
    let want_mu = [
        crossing(|x| dev(o.at_mean(x)), mu, mu - 10.0, cut),
        crossing(|x| dev(o.at_mean(x)), mu, mu + 10.0, cut),
    ];
    let want_sigma = [
        crossing(
            |l| dev(o.at_sigma2((2.0 * l).exp())),
            s.ln(),
            s.ln() - 5.0,
            cut,
        ),
        crossing(
            |l| dev(o.at_sigma2((2.0 * l).exp())),
            s.ln(),
            s.ln() + 5.0,
            cut,
        ),
    ];
    let mu_range = got[0].unwrap();
    let sigma_range = got[2].unwrap();
    for (g, w) in mu_range
        .iter()
        .zip(&want_mu)
        .chain(sigma_range.iter().zip(&want_sigma))
    {
        assert!((g - w).abs() < 1e-6, "{got:?}: {g} against {w}");
    }
    let tau_range = got[1].unwrap();
    let tau_dev = |l: f64| dev(o.at_tau2((2.0 * l).exp()));
    let upper = crossing(tau_dev, t.ln(), 5.0, cut);
    assert!(
        (tau_range[1] - upper).abs() < 1e-6,
        "{tau_range:?} against {upper}"
    );
    // The lower end: where the profile falls that far, or 0 (−∞) where it never does.
    if tau_dev(-30.0) < cut {
        assert_eq!(tau_range[0], f64::NEG_INFINITY, "{tau_range:?}");
    } else {
        let lower = crossing(tau_dev, t.ln(), -30.0, cut);
        assert!(
            (tau_range[0] - lower).abs() < 1e-6,
            "{tau_range:?} against {lower}"
        );
    }
}

#[test]
fn one_way_profiles_cross_where_their_reduced_profiles_do() {
    let (a, n) = (8, 5);
    let m = one_way(a, n, 3);
    let y: Vec<f64> = m.y.clone();
    one_way_intervals(&m, &y, a, n);
}

#[test]
fn a_singular_fit_s_sd_reaches_zero_and_the_others_leave_the_boundary() {
    // Groups that differ a little less than their rows (SSB/a = 0.84 SSW/(a(n − 1))): the
    // maximum has τ = 0, and the profile of μ moves τ off it (λ = B/a where that exceeds σ²).
    let (a, n) = (6, 4);
    let y: Vec<f64> = (0..a * n)
        .map(|i| 1.0 + ((i * 7) % 5) as f64 * 0.4 + 0.7 * ((i / n * 5) % 6) as f64 / 5.0)
        .collect();
    let g: Vec<usize> = (0..a * n).map(|i| i / n).collect();
    let m = Glmm::new(
        Family::Gaussian,
        y.clone(),
        vec![1.0; a * n],
        &g,
        vec![1.0; a * n],
        None,
    )
    .unwrap();
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    assert!(fit.singular, "{fit:?}");
    one_way_intervals(&m, &y, a, n);
}

#[test]
fn every_sd_and_each_correlation_with_the_first_effect_are_profiled() {
    // Poisson correlated slopes: β₀, β₁, the intercept's and the slope's log sds in the places
    // of log L₀₀ and log L₁₁, their correlation in L₁₀'s.
    let n = 60;
    let x: Vec<f64> = (0..n)
        .flat_map(|i| [1.0, ((i * 7) % 11) as f64 / 5.0 - 1.0])
        .collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 5) % 7) as f64).collect();
    let term = RandomTerm {
        group: (0..n).map(|i| i % 6).collect(),
        z: x.clone(),
        correlated: true,
    };
    let m = Glmm::with_terms(Family::Poisson, y, x, vec![term], None).unwrap();
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    let got = m.profile_intervals(&fit, 0.9).unwrap();
    let s = m.summary(&fit.theta, Some(&fit.covariance));
    let sd = &s.random[0].sd;
    let estimates = [
        fit.theta[0],
        fit.theta[1],
        sd[0].value.ln(),
        sd[1].value.ln(),
        s.random[0].cor[1][0],
    ];
    for (j, (r, e)) in got.iter().zip(estimates).enumerate() {
        let [lo, hi] = r.unwrap();
        assert!(lo < e && e < hi, "{j}: {e} outside {r:?}");
    }
    assert!(got[4].unwrap().iter().all(|c| c.abs() <= 1.0));
}

#[test]
fn a_level_outside_zero_to_one_and_a_reml_fit_are_refused() {
    let m = one_way(5, 3, 1);
    let fit = m.fit_exact(&ExactSettings::default()).unwrap();
    for level in [0.0, 1.0, -0.5, f64::NAN] {
        let e = m.profile_intervals(&fit, level).unwrap_err().to_string();
        assert!(e.contains("level"), "{e}");
    }
    let reml = ExactSettings {
        criterion: Criterion::Reml,
        ..ExactSettings::default()
    };
    let fit = m.fit_exact(&reml).unwrap();
    let e = m.profile_intervals(&fit, 0.95).unwrap_err().to_string();
    assert!(e.contains("maximum likelihood"), "{e}");
}
