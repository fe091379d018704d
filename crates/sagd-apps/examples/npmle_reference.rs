//! Where maximum likelihood itself leads on Table 1's data: the NPMLE of π (the law of Z that
//! maximises the likelihood over all laws) on each replication's data, and the iterates on its
//! way there, measured by D and W as Table 1 measures the methods, beside the paper's SAGD.
//!
//!     cargo run --release -p sagd-apps --example npmle_reference [table1|uniform|all] [REPS]
//!
//! (default: all, 30 replications; about 25 minutes on 2 cores, the uniform part 3 of them)
//!
//! Prints a Markdown table: mean (standard error) over the replications of seeds 0..REPS,
//! n = 1000, for the iterates within 1e-3, 1e-4 and 1e-5 nats per observation of the maximum.
//! Then the same fit on a law with a bounded support, Z ~ U(−2, 2): how much weight maximum
//! likelihood puts at the support's edges (π: 2.5% in each outermost 0.1 of it).

use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;
use sagd_apps::debias::npmle::{npmle_path, table1_reference, NpmleReplication, GRID_ATOMS};
use sagd_apps::debias::{paper, Case};

const TOLS: [f64; 3] = [1e-3, 1e-4, 1e-5];

fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, (var / n).sqrt())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let part = args.first().map_or("all", |a| a.as_str());
    let reps: u64 = match args.get(1).map(|a| a.parse()) {
        None => 30,
        Some(Ok(r)) if r >= 2 => r,
        Some(_) => {
            eprintln!("error: REPS must be a whole number ≥ 2 (the standard errors need two)");
            std::process::exit(2);
        }
    };
    match part {
        "table1" => table1(reps),
        "uniform" => uniform_edges(reps),
        "all" => {
            table1(reps);
            uniform_edges(reps.min(10));
        }
        other => {
            eprintln!("error: {other}: the part is table1, uniform or all");
            std::process::exit(2);
        }
    }
}

/// Table 1's three 1-D cases, `reps` replications each.
fn table1(reps: u64) {
    let seeds: Vec<u64> = (0..reps).collect();
    println!("| case | within (nats per observation) of the maximum | W | D | log-likelihood above π's, per observation | atoms with 99% of the weight | SAGD in the paper, W | SAGD in the paper, D |");
    println!("|---|---|---|---|---|---|---|---|");
    for case in [Case::Normal, Case::Exp, Case::Mixture] {
        let t0 = std::time::Instant::now();
        let runs = table1_reference(case, 1000, &seeds, &TOLS);
        let sagd = |metric: &str| {
            paper(case, metric).map_or("—".into(), |p| format!("{:.3} ({:.4})", p[3].0, p[3].1))
        };
        for (level, tol) in TOLS.iter().enumerate() {
            let rows: Vec<&NpmleReplication> = runs.iter().map(|r| &r[level]).collect();
            let col = |f: &dyn Fn(&NpmleReplication) -> f64| {
                mean_se(&rows.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let (w, d) = (col(&|r| r.w1), col(&|r| r.ks));
            let gain = col(&|r| r.loglik - r.loglik_truth);
            let atoms = col(&|r| r.atoms_99 as f64);
            let missed = rows.iter().filter(|r| r.gap > r.tol).count();
            let within = if missed == 0 {
                format!("{tol:.0e}")
            } else {
                format!("{tol:.0e} ({missed} not reached)")
            };
            println!(
                "| {} | {within} | {:.3} ({:.4}) | {:.3} ({:.4}) | {:.4} ({:.4}) | {:.1} | {} | {} |",
                case.name(),
                w.0,
                w.1,
                d.0,
                d.1,
                gain.0,
                gain.1,
                atoms.0,
                sagd("W"),
                sagd("D")
            );
        }
        eprintln!(
            "{}: {} replications in {:.1} s",
            case.name(),
            reps,
            t0.elapsed().as_secs_f64()
        );
    }
}

/// The weight of the NPMLE's 0.1-wide window of most weight within 0.5 of either end of U(−2, 2)'s
/// support, on `reps` data sets of 1000 points, at each gap level; π puts 2.5% in such a window.
fn uniform_edges(reps: u64) {
    println!();
    println!("| Z ~ U(−2, 2), n = 1000 | within (nats per observation) of the maximum | weight in the heaviest 0.1-wide window near an edge (π: 0.025) | W to π |");
    println!("|---|---|---|---|");
    let runs: Vec<Vec<(f64, f64)>> = (0..reps)
        .map(|seed| {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let x: Vec<f64> = (0..1000)
                .map(|_| {
                    let e: f64 = StandardNormal.sample(&mut rng);
                    rng.random_range(-2.0..2.0) + e
                })
                .collect();
            npmle_path(&x, GRID_ATOMS, 100_000, &TOLS)
                .iter()
                .map(|f| {
                    let heaviest = |centre: f64| {
                        (0..=40)
                            .map(|k| centre - 0.5 + k as f64 * 0.025)
                            .map(|a| {
                                f.atoms
                                    .iter()
                                    .zip(&f.weights)
                                    .filter(|(t, _)| **t >= a && **t < a + 0.1)
                                    .map(|(_, w)| w)
                                    .sum::<f64>()
                            })
                            .fold(0.0, f64::max)
                    };
                    // W to U(−2, 2): ∫ |G − F| over the quantiles of G.
                    let q = f.quantile_sample(20_000);
                    let w = q
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (v - (-2.0 + 4.0 * (i as f64 + 0.5) / 20_000.0)).abs())
                        .sum::<f64>()
                        / 20_000.0;
                    (heaviest(-2.0).max(heaviest(2.0)), w)
                })
                .collect()
        })
        .collect();
    for (level, tol) in TOLS.iter().enumerate() {
        let edge = mean_se(&runs.iter().map(|r| r[level].0).collect::<Vec<_>>());
        let w = mean_se(&runs.iter().map(|r| r[level].1).collect::<Vec<_>>());
        println!(
            "| {reps} data sets | {tol:.0e} | {:.3} ({:.4}) | {:.3} ({:.4}) |",
            edge.0, edge.1, w.0, w.1
        );
    }
}
