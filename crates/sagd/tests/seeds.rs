//! Independent seeds: no two run seeds, chains, polishing attempts or polishing steps share a
//! random stream. Each stream's first normal draw is a 64-bit fingerprint of it; among 100 seeds
//! × (4 EM chains + 3 attempts × 16 steps × 4 chains) = 19 600 streams, all must differ.

use std::collections::HashMap;

use sagd::em::{attempt_seed, polish_seed};
use sagd::rng::{stream_seed, ChainRng};

#[test]
fn seeds_0_to_99_share_no_stream() {
    let mut seen: HashMap<u64, String> = HashMap::new();
    let mut add = |seed: u64, chain: u64, what: String| {
        let first = ChainRng::new(seed, chain).normal.draw().to_bits();
        if let Some(other) = seen.insert(first, what.clone()) {
            panic!("{what} and {other} start with the same draw");
        }
    };
    for run in 0..100u64 {
        for chain in 0..4 {
            add(run, chain, format!("run {run}, EM chain {chain}"));
        }
        for attempt in 0..3 {
            let attempt_streams = attempt_seed(polish_seed(run), attempt);
            for step in 0..16u64 {
                for chain in 0..4 {
                    add(
                        stream_seed(attempt_streams, step),
                        chain,
                        format!("run {run}, polish attempt {attempt}, step {step}, chain {chain}"),
                    );
                }
            }
        }
    }
    assert_eq!(seen.len(), 100 * (4 + 3 * 16 * 4));
}
