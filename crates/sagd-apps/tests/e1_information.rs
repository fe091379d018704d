//! Standard errors by Louis' identity against closed forms and quadrature.

use sagd::em::information::{louis_information, InformationMethod, LouisSettings};
use sagd::em::maximum_likelihood;
use sagd::error::LogpError;
use sagd::model::LatentModel;
use sagd::quadrature::{expected_grad, posterior_rule, GaussHermite};
use sagd_apps::e1::GammaSigmoid;

/// X_i | Z_i ~ N(Z_i, 1), Z_i ~ N(μ, 1): X_i ~ N(μ, 2), so I(μ) = n/2 and se(μ̂) = √(2/n).
struct NormalNormal {
    x: Vec<f64>,
}

impl LatentModel<f64> for NormalNormal {
    fn n_data(&self) -> usize {
        self.x.len()
    }
    fn latent_dim(&self) -> usize {
        1
    }
    fn theta_dim(&self) -> usize {
        1
    }
    fn log_joint(
        &self,
        th: &[f64],
        data: &[usize],
        z: &[f64],
        lp: &mut [f64],
        gz: &mut [f64],
    ) -> Result<(), LogpError> {
        for (r, &i) in data.iter().enumerate() {
            let (zi, xi) = (z[r], self.x[i]);
            lp[r] = -0.5 * (zi - th[0]).powi(2) - 0.5 * (xi - zi).powi(2);
            gz[r] = -(zi - th[0]) + (xi - zi);
        }
        Ok(())
    }
    fn add_grad_theta(
        &self,
        th: &[f64],
        _data: &[usize],
        z: &[f64],
        g: &mut [f64],
    ) -> Result<(), LogpError> {
        for zi in z {
            g[0] += zi - th[0];
        }
        Ok(())
    }
}

/// Mean and standard deviation over seeds of each coordinate's standard error.
fn over_seeds(f: impl Fn(u64) -> Vec<f64>, seeds: u64) -> (Vec<f64>, Vec<f64>) {
    let runs: Vec<Vec<f64>> = (0..seeds).map(f).collect();
    let p = runs[0].len();
    let r = seeds as f64;
    let mean: Vec<f64> = (0..p)
        .map(|j| runs.iter().map(|v| v[j]).sum::<f64>() / r)
        .collect();
    let sd = (0..p)
        .map(|j| (runs.iter().map(|v| (v[j] - mean[j]).powi(2)).sum::<f64>() / (r - 1.0)).sqrt())
        .collect();
    (mean, sd)
}

#[test]
fn louis_standard_error_matches_the_closed_form() {
    let n = 200;
    let x: Vec<f64> = (0..n)
        .map(|i| ((i * 37 % 101) as f64 / 101.0 - 0.5) * 4.0 + 1.0)
        .collect();
    let mu_hat = x.iter().sum::<f64>() / n as f64;
    let m = NormalNormal { x };
    let want = (2.0 / n as f64).sqrt();
    let seeds = 6;
    // Louis' identity: within its Monte Carlo error.
    let louis = LouisSettings {
        method: InformationMethod::Louis,
        draws: 1000,
        ..LouisSettings::default()
    };
    let (mean, sd) = over_seeds(
        |seed| louis_information(&m, &[mu_hat], &louis, seed).unwrap().se,
        seeds,
    );
    println!(
        "se(μ̂): Louis {} ± {} (sd over seeds), closed form {want}",
        mean[0], sd[0]
    );
    // Five Monte Carlo standard errors of the mean over seeds.
    assert!(
        (mean[0] - want).abs() < 5.0 * sd[0] / (seeds as f64).sqrt(),
        "{mean:?} vs {want}"
    );
    assert!(sd[0] < 0.1 * want, "too noisy: {sd:?}");
    // Coupled differences of the score (the default): here the score is linear in z and the
    // paired chains move by exactly the shift of the posterior mean, so the information is
    // exact to rounding, with a jackknife error of the same order.
    for seed in 0..seeds {
        let i = louis_information(&m, &[mu_hat], &LouisSettings::default(), seed).unwrap();
        assert!((i.se[0] - want).abs() < 1e-9 * want, "{:?} vs {want}", i.se);
        assert!(i.se_error[0] < 1e-9 * want, "{:?}", i.se_error);
    }
}

#[test]
fn louis_standard_errors_match_the_quadrature_hessian_of_the_log_likelihood() {
    let m = GammaSigmoid::simulate(100, 2.0, 0.5, 1).unwrap().0;
    let gh = GaussHermite::new(100);
    let mle = maximum_likelihood(&m, &[2.4, 0.8], &gh).unwrap();
    assert!(mle.converged);
    let th = mle.x.clone();
    // −∇²ℓ by central differences of the quadrature gradient (Fisher's identity).
    let grad = |t: &[f64]| {
        let rule = posterior_rule(&m, t, &gh).unwrap();
        expected_grad(&m, t, &rule, 1.0).unwrap()
    };
    let h = 1e-4;
    let mut info = [[0.0; 2]; 2];
    for j in 0..2 {
        let (mut tp, mut tm) = (th.clone(), th.clone());
        tp[j] += h;
        tm[j] -= h;
        let (gp, gm) = (grad(&tp), grad(&tm));
        for k in 0..2 {
            info[j][k] = -(gp[k] - gm[k]) / (2.0 * h);
        }
    }
    let sym = 0.5 * (info[0][1] + info[1][0]);
    let det = info[0][0] * info[1][1] - sym * sym;
    let want = [(info[1][1] / det).sqrt(), (info[0][0] / det).sqrt()];
    let seeds = 6;
    let (mean, sd) = over_seeds(
        |seed| {
            louis_information(&m, &th, &LouisSettings::default(), seed)
                .unwrap()
                .se
        },
        seeds,
    );
    println!("se(a, b): Louis {mean:?} ± {sd:?} (sd over seeds), quadrature {want:?}");
    for j in 0..2 {
        assert!(
            (mean[j] - want[j]).abs() < 5.0 * sd[j] / (seeds as f64).sqrt(),
            "coordinate {j}: {} vs {}",
            mean[j],
            want[j]
        );
    }
}
