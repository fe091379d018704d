//! Wall seconds of an experiment's stages and, in a run split over processes, what each stage
//! exchanged: E1's and E3's results record both.

use std::collections::BTreeMap;
use std::time::Instant;

use sagd::share::Exchanged;

/// A clock over an experiment's stages, each ended by [`Laps::lap`].
pub(crate) struct Laps {
    clock: Instant,
    before: Exchanged,
    /// Wall seconds per stage.
    pub(crate) timing: BTreeMap<String, f64>,
    /// What this process exchanged per stage (only in a split run).
    pub(crate) exchanged: BTreeMap<String, Exchanged>,
}

impl Laps {
    /// The first stage starts now.
    pub(crate) fn start() -> Self {
        Laps {
            clock: Instant::now(),
            before: sagd::share::exchanged(),
            timing: BTreeMap::new(),
            exchanged: BTreeMap::new(),
        }
    }

    /// Ends stage `name`, and starts the next.
    pub(crate) fn lap(&mut self, name: &str) {
        self.timing
            .insert(name.to_string(), self.clock.elapsed().as_secs_f64());
        self.clock = Instant::now();
        if sagd::share::size() > 1 {
            let now = sagd::share::exchanged();
            self.exchanged
                .insert(name.to_string(), now.since(&self.before));
            self.before = now;
        }
    }
}
