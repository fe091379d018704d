//! The debiased VAE of the paper: U ~ N(0, I), Z = h_θ(U), X | U ~ N(h_θ(U), I), with an encoder
//! q_φ(u | x) = N(μ_φ(x), diag σ²_φ(x)). The decoder's posterior p(u | x; θ) is a [`LatentModel`]
//! whose ∇u and ∇θ come from the engine, so the core crate's chains, HMC and SAGD run on it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sagd::error::LogpError;
use sagd::model::LatentModel;
use sagd::rng::Seed;

use crate::math::Activation;
use crate::net::{Sequential, Workspace, WorkspacePool};

/// Decoder and encoder shapes: MLPs d → h → h → d and d → h → h → 2d with softplus hidden layers.
#[derive(Clone, Debug, PartialEq)]
pub struct Vae {
    /// Latent and data dimension.
    pub d: usize,
    /// h_θ.
    pub dec: Sequential,
    /// (μ_φ, log σ²_φ).
    pub enc: Sequential,
}

/// The parameters of both networks.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VaeParams {
    /// θ.
    pub dec: Vec<f32>,
    /// φ.
    pub enc: Vec<f32>,
}

impl Vae {
    /// The paper's networks for dimension `d` and hidden width `hidden`.
    pub fn new(d: usize, hidden: usize) -> Self {
        Vae {
            d,
            dec: Sequential::mlp(&[d, hidden, hidden, d], Activation::Softplus),
            enc: Sequential::mlp(&[d, hidden, hidden, 2 * d], Activation::Softplus),
        }
    }

    /// Rows (decoder rows, or points through the encoder) per chunk of a parallel pass: the
    /// smaller of the two networks' [`Sequential::chunk_rows`].
    pub fn chunk_rows(&self) -> usize {
        self.dec.chunk_rows().min(self.enc.chunk_rows())
    }

    /// Rows per piece of a parallel pass over `n` rows through both networks: the larger of the
    /// networks' [`Sequential::piece_rows`].
    pub fn piece_rows(&self, n: usize) -> usize {
        self.dec.piece_rows(n).max(self.enc.piece_rows(n))
    }

    /// Initial parameters (PyTorch's default law) from a seed.
    pub fn init(&self, seed: u64) -> VaeParams {
        VaeParams {
            dec: self.dec.init(Seed::new(seed).stream("decoder").get()),
            enc: self.enc.init(Seed::new(seed).stream("encoder").get()),
        }
    }
}

/// A forward pass kept for a later θ-gradient at the same points.
struct LastPass {
    theta: Vec<f32>,
    data: Vec<usize>,
    u: Vec<f32>,
    ws: Workspace,
    r: Vec<f32>,
}

/// The posterior p(u | x_i; θ) ∝ N(u; 0, I) N(x_i; h_θ(u), I) over a data set, as a [`LatentModel`]
/// (constants dropped): log p = −½‖u‖² − ½‖x_i − h_θ(u)‖².
pub struct DecoderPosterior<'a> {
    dec: &'a Sequential,
    x: &'a [f32],
    d: usize,
    /// Each worker thread's forward-pass buffers and residuals.
    pool: WorkspacePool<(Workspace, Vec<f32>)>,
    remember: bool,
    reused: AtomicUsize,
    /// The last forward pass of each block of rows, in the slot of the block's first row (see
    /// [`DecoderPosterior::keeping_passes`]): one lock per block, so blocks never wait on each
    /// other.
    last: Vec<Mutex<Option<LastPass>>>,
}

impl<'a> DecoderPosterior<'a> {
    /// The posterior of decoder `dec` for data `x` (n × d, row-major).
    pub fn new(dec: &'a Sequential, x: &'a [f32]) -> Self {
        let mut pool = WorkspacePool::default();
        pool.ensure(rayon::current_num_threads());
        DecoderPosterior {
            dec,
            x,
            d: dec.input_dim(),
            pool,
            remember: false,
            reused: AtomicUsize::new(0),
            last: Vec::new(),
        }
    }

    /// With `on`, [`LatentModel::log_joint`] keeps each block's forward pass, and
    /// [`LatentModel::add_grad_theta`] at the same θ and rows reuses it for the rows whose u is
    /// unchanged (bit for bit), running a pass of its own only for the others. An HMC transition
    /// ends with an evaluation at its proposal, which nearly always becomes the chain's state: its
    /// θ-gradient then costs a backward pass, not a forward one too. (A cache: results are the
    /// same bits either way.)
    pub fn keeping_passes(mut self, on: bool) -> Self {
        self.remember = on;
        let n = if on { self.x.len() / self.d.max(1) } else { 0 };
        self.last = (0..n).map(|_| Mutex::new(None)).collect();
        self
    }

    /// How many θ-gradient calls have reused a kept forward pass.
    pub fn reused_passes(&self) -> usize {
        self.reused.load(Ordering::SeqCst)
    }

    /// The slot of the block of rows `data`.
    fn slot(&self, data: &[usize]) -> Option<&Mutex<Option<LastPass>>> {
        data.first().and_then(|&i| self.last.get(i))
    }

    /// Keeps a block's forward pass (workspace and residuals) in place of the block's last one;
    /// the caller gets the replaced pass's buffers back to reuse.
    fn keep_pass(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        ws: &mut Workspace,
        r: &mut Vec<f32>,
    ) {
        let Some(Ok(mut slot)) = self.slot(data).map(|m| m.lock()) else {
            return;
        };
        match slot.as_mut() {
            // The slot keeps its allocations (θ is large for wide decoders, and this runs at
            // every evaluation).
            Some(kept) if kept.data == data => {
                kept.theta.clear();
                kept.theta.extend_from_slice(theta);
                kept.u.clear();
                kept.u.extend_from_slice(u);
                std::mem::swap(&mut kept.ws, ws);
                std::mem::swap(&mut kept.r, r);
            }
            _ => {
                *slot = Some(LastPass {
                    theta: theta.to_vec(),
                    data: data.to_vec(),
                    u: u.to_vec(),
                    ws: std::mem::take(ws),
                    r: std::mem::take(r),
                })
            }
        }
    }

    /// ∇θ from a kept pass at the same θ and rows: the rows whose u changed since are left out of
    /// it and returned. None without such a pass.
    fn grad_theta_from_kept(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        grad_theta: &mut [f32],
    ) -> Option<Vec<usize>> {
        let d = self.d;
        let slot = self.slot(data)?;
        // Out of its slot while in use; compared outside the lock.
        let mut kept = slot.lock().ok()?.take()?;
        if kept.data != data || kept.theta != theta {
            return None;
        }
        let mut stale = Vec::new();
        let mut r = kept.r.clone();
        for (k, ((rr, now), then)) in r
            .chunks_exact_mut(d)
            .zip(u.chunks_exact(d))
            .zip(kept.u.chunks_exact(d))
            .enumerate()
        {
            if now
                .iter()
                .zip(then)
                .any(|(a, b)| a.to_bits() != b.to_bits())
            {
                rr.iter_mut().for_each(|v| *v = 0.0);
                stale.push(k);
            }
        }
        self.dec
            .backward(theta, &mut kept.ws, &r, Some(grad_theta), None);
        self.reused.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut s) = slot.lock() {
            // Unless a newer pass of these rows came in meanwhile.
            if s.is_none() {
                *s = Some(kept);
            }
        }
        Some(stale)
    }

    /// log p and ∇u at the rows, and with `grad_theta` Σ ∇θ log p from the same backward pass.
    fn evaluate(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        logp: &mut [f32],
        grad_u: &mut [f32],
        grad_theta: Option<&mut [f32]>,
    ) -> Result<(), LogpError> {
        let d = self.d;
        self.pool.with(|(ws, r)| {
            self.residuals(theta, data, u, ws, r);
            for ((lp, rr), uu) in logp
                .iter_mut()
                .zip(r.chunks_exact(d))
                .zip(u.chunks_exact(d))
            {
                let s: f32 =
                    rr.iter().map(|v| v * v).sum::<f32>() + uu.iter().map(|v| v * v).sum::<f32>();
                *lp = -0.5 * s;
            }
            // ∇u = J_hᵀ (x − h) − u; ∇θ = Σ J_θᵀ (x − h) from the same pass.
            self.dec.backward(theta, ws, r, grad_theta, Some(grad_u));
            for (g, uu) in grad_u.iter_mut().zip(u) {
                *g -= uu;
            }
            if self.remember {
                self.keep_pass(theta, data, u, ws, r);
            }
        });
        Ok(())
    }

    /// Forward pass at u; leaves the residuals x − h(u) in `r`.
    fn residuals(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        ws: &mut Workspace,
        r: &mut Vec<f32>,
    ) {
        let d = self.d;
        let rows = data.len();
        self.dec.forward(theta, u, rows, ws);
        r.resize(rows * d, 0.0);
        for ((rr, h), &i) in r
            .chunks_exact_mut(d)
            .zip(ws.output().chunks_exact(d))
            .zip(data)
        {
            for j in 0..d {
                rr[j] = self.x[i * d + j] - h[j];
            }
        }
    }
}

impl LatentModel<f32> for DecoderPosterior<'_> {
    fn n_data(&self) -> usize {
        self.x.len() / self.d.max(1)
    }
    fn latent_dim(&self) -> usize {
        self.d
    }
    fn theta_dim(&self) -> usize {
        self.dec.n_params()
    }
    fn log_joint(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        logp: &mut [f32],
        grad_u: &mut [f32],
    ) -> Result<(), LogpError> {
        self.evaluate(theta, data, u, logp, grad_u, None)
    }
    fn fuses_grad_theta(&self) -> bool {
        true
    }
    fn log_joint_and_grad_theta(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        logp: &mut [f32],
        grad_u: &mut [f32],
        grad_theta: &mut [f32],
    ) -> Result<(), LogpError> {
        self.evaluate(theta, data, u, logp, grad_u, Some(grad_theta))
    }
    fn add_grad_theta(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        grad_theta: &mut [f32],
    ) -> Result<(), LogpError> {
        let d = self.d;
        let (data, u): (Cow<[usize]>, Cow<[f32]>) = match self
            .remember
            .then(|| self.grad_theta_from_kept(theta, data, u, grad_theta))
            .flatten()
        {
            Some(stale) if stale.is_empty() => return Ok(()),
            Some(stale) => (
                stale.iter().map(|&k| data[k]).collect(),
                stale
                    .iter()
                    .flat_map(|&k| u[k * d..(k + 1) * d].iter().copied())
                    .collect(),
            ),
            None => (Cow::Borrowed(data), Cow::Borrowed(u)),
        };
        self.pool.with(|(ws, r)| {
            self.residuals(theta, &data, &u, ws, r);
            // ∇θ Σ log p = Σ J_θᵀ (x − h).
            self.dec.backward(theta, ws, r, Some(grad_theta), None);
        });
        Ok(())
    }
}
