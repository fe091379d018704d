//! Random-effect terms: what the user gives, how θ parametrises each term's covariance, and the
//! blocks of rows (EM's data points) that shared levels link.

/// One random-effect term, `(Z | g)` in lme4's notation.
#[derive(Clone, Debug)]
pub struct RandomTerm {
    /// The level of the term's grouping factor at each row, numbered 0..G with every level used.
    pub group: Vec<usize>,
    /// The term's design, row-major n × q (a column of ones: a random intercept).
    pub z: Vec<f64>,
    /// Whether a level's q effects are correlated (a full covariance) or independent.
    pub correlated: bool,
}

/// A term as the model keeps it.
#[derive(Clone, Debug)]
pub(super) struct Term {
    pub(super) z: Vec<f64>,
    pub(super) q: usize,
    pub(super) correlated: bool,
    /// Where its parameters start in θ.
    pub(super) theta_at: usize,
    /// Per level of its factor: the point the level belongs to, and where its q effects start in
    /// that point's latent.
    pub(super) levels: Vec<(usize, usize)>,
    /// Per row, where its level's effects start in its point's latent.
    pub(super) slot: Vec<usize>,
}

impl Term {
    pub(super) fn n_params(&self) -> usize {
        self.q
            + if self.correlated {
                self.q * (self.q - 1) / 2
            } else {
                0
            }
    }

    /// L (q × q, row-major, lower-triangular) from θ.
    pub(super) fn factor(&self, theta: &[f64]) -> Vec<f64> {
        let q = self.q;
        let par = &theta[self.theta_at..self.theta_at + self.n_params()];
        let mut l = vec![0.0; q * q];
        for a in 0..q {
            l[a * q + a] = par[a].exp();
        }
        if self.correlated {
            let mut k = q;
            for a in 1..q {
                for b in 0..a {
                    l[a * q + b] = par[k];
                    k += 1;
                }
            }
        }
        l
    }
}

/// The rows of one data point and the size of its latent.
#[derive(Clone, Debug)]
pub(super) struct Component {
    /// Its rows, side by side in the model's storage.
    pub(super) rows: std::ops::Range<usize>,
    pub(super) dim: usize,
}

/// Where the data's rows and the terms' levels sit among EM's data points: each point's rows,
/// the size of its latent, and per term where each level's effects and each row's level start
/// in their point's latent (levels placed in the order their point first meets them).
pub(super) struct Layout {
    /// Each point's rows, in the data's order.
    pub(super) point_rows: Vec<Vec<usize>>,
    dims: Vec<usize>,
    /// Per term: per level (point, start), per row the start of its level's effects.
    level_at: Vec<Vec<(usize, usize)>>,
    slots: Vec<Vec<usize>>,
}

impl Layout {
    /// The layout of the checked `terms` (`levels[t]` levels of term t) over n rows.
    pub(super) fn of(terms: &[RandomTerm], levels: &[usize], n: usize) -> Layout {
        let set = connected_rows(terms, levels, n);
        let n_points = set.iter().max().map_or(0, |m| m + 1);
        let mut point_rows = vec![Vec::new(); n_points];
        for (i, &c) in set.iter().enumerate() {
            point_rows[c].push(i);
        }
        let mut dims = vec![0; n_points];
        let mut level_at = Vec::with_capacity(terms.len());
        let mut slots = Vec::with_capacity(terms.len());
        for (t, term) in terms.iter().enumerate() {
            let q = term.z.len() / n;
            let mut at = vec![(usize::MAX, usize::MAX); levels[t]];
            let mut slot = vec![0; n];
            for (i, &l) in term.group.iter().enumerate() {
                if at[l].1 == usize::MAX {
                    at[l] = (set[i], dims[set[i]]);
                    dims[set[i]] += q;
                }
                slot[i] = at[l].1;
            }
            level_at.push(at);
            slots.push(slot);
        }
        Layout {
            point_rows,
            dims,
            level_at,
            slots,
        }
    }

    /// The terms as the model keeps them, their parameters in θ after the p fixed effects.
    pub(super) fn into_terms(self, terms: Vec<RandomTerm>, p: usize, n: usize) -> Vec<Term> {
        let mut theta_at = p;
        terms
            .into_iter()
            .zip(self.level_at)
            .zip(self.slots)
            .map(|((term, levels), slot)| {
                let q = term.z.len() / n;
                let kept = Term {
                    z: term.z,
                    q,
                    correlated: term.correlated && q > 1,
                    theta_at,
                    levels,
                    slot,
                };
                theta_at += kept.n_params();
                kept
            })
            .collect()
    }

    /// The points, their rows side by side in the points' order, and the largest latent.
    pub(super) fn points(&self) -> (Vec<Component>, usize) {
        let mut end = 0;
        let points = self
            .point_rows
            .iter()
            .zip(&self.dims)
            .map(|(rows, &dim)| {
                end += rows.len();
                Component {
                    rows: end - rows.len()..end,
                    dim,
                }
            })
            .collect();
        (points, self.dims.iter().copied().max().unwrap_or(0))
    }
}

/// The connected sets of rows linked by shared levels: per row its set, numbered in the order of
/// the first term's levels (so that with one term, set j is group j).
fn connected_rows(terms: &[RandomTerm], levels: &[usize], n: usize) -> Vec<usize> {
    let offsets: Vec<usize> = levels
        .iter()
        .scan(0, |acc, &l| {
            let at = *acc;
            *acc += l;
            Some(at)
        })
        .collect();
    let mut parent: Vec<usize> = (0..levels.iter().sum()).collect();
    fn root(parent: &mut [usize], mut a: usize) -> usize {
        while parent[a] != a {
            parent[a] = parent[parent[a]];
            a = parent[a];
        }
        a
    }
    for i in 0..n {
        let first = root(&mut parent, terms[0].group[i]);
        for (t, term) in terms.iter().enumerate().skip(1) {
            let other = root(&mut parent, offsets[t] + term.group[i]);
            if other != first {
                parent[other.max(first)] = other.min(first);
            }
        }
    }
    let mut number = vec![usize::MAX; parent.len()];
    let mut next = 0;
    for level in 0..levels[0] {
        let r = root(&mut parent, level);
        if number[r] == usize::MAX {
            number[r] = next;
            next += 1;
        }
    }
    (0..n)
        .map(|i| number[root(&mut parent, terms[0].group[i])])
        .collect()
}
