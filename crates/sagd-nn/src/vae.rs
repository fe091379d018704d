//! The debiased VAE of the paper: U ~ N(0, I), Z = h_θ(U), X | U ~ N(h_θ(U), I), with an encoder
//! q_φ(u | x) = N(μ_φ(x), diag σ²_φ(x)). The decoder's posterior p(u | x; θ) is a [`LatentModel`]
//! whose ∇u and ∇θ come from the engine, so the core crate's chains, HMC and SAGD run on it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sagd::error::LogpError;
use sagd::model::LatentModel;

use crate::math::Activation;
use crate::net::{Sequential, Workspace};

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

    /// Initial parameters (PyTorch's default law) from a seed.
    pub fn init(&self, seed: u64) -> VaeParams {
        VaeParams {
            dec: self.dec.init(seed),
            enc: self.enc.init(seed ^ 0x9E37_79B9_7F4A_7C15),
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
    pool: Mutex<Vec<(Workspace, Vec<f32>)>>,
    remember: bool,
    reused: AtomicUsize,
    /// The last forward pass of each block of rows (see [`DecoderPosterior::keeping_passes`]).
    last: Mutex<Vec<LastPass>>,
}

impl<'a> DecoderPosterior<'a> {
    /// The posterior of decoder `dec` for data `x` (n × d, row-major).
    pub fn new(dec: &'a Sequential, x: &'a [f32]) -> Self {
        DecoderPosterior {
            dec,
            x,
            d: dec.input_dim(),
            pool: Mutex::new(Vec::new()),
            remember: false,
            reused: AtomicUsize::new(0),
            last: Mutex::new(Vec::new()),
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
        self
    }

    fn with_workspace<R>(&self, f: impl FnOnce(&mut Workspace, &mut Vec<f32>) -> R) -> R {
        let mut w = self.take_workspace();
        let r = f(&mut w.0, &mut w.1);
        if let Ok(mut p) = self.pool.lock() {
            p.push(w);
        }
        r
    }

    fn take_workspace(&self) -> (Workspace, Vec<f32>) {
        self.pool
            .lock()
            .map(|mut p| p.pop())
            .unwrap_or(None)
            .unwrap_or_default()
    }

    /// How many θ-gradient calls have reused a kept forward pass.
    pub fn reused_passes(&self) -> usize {
        self.reused.load(Ordering::SeqCst)
    }

    /// Keeps a block's forward pass (workspace and residuals) in place of the block's last one.
    fn keep_pass(&self, theta: &[f32], data: &[usize], u: &[f32], ws: Workspace, r: Vec<f32>) {
        let (Ok(mut last), Ok(mut pool)) = (self.last.lock(), self.pool.lock()) else {
            return;
        };
        match last.iter_mut().find(|l| l.data == data) {
            // The block's slot is reused: its θ and u copies keep their allocations (θ is large for
            // wide decoders, and this runs at every evaluation).
            Some(slot) => {
                slot.theta.clear();
                slot.theta.extend_from_slice(theta);
                slot.u.clear();
                slot.u.extend_from_slice(u);
                let old_ws = std::mem::replace(&mut slot.ws, ws);
                let old_r = std::mem::replace(&mut slot.r, r);
                pool.push((old_ws, old_r));
            }
            None => last.push(LastPass {
                theta: theta.to_vec(),
                data: data.to_vec(),
                u: u.to_vec(),
                ws,
                r,
            }),
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
        // Out of the shared list while in use, so that other blocks' calls do not wait on it.
        let mut kept = {
            let mut last = self.last.lock().ok()?;
            let at = last
                .iter()
                .position(|l| l.data == data && l.theta == theta)?;
            last.swap_remove(at)
        };
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
        if let Ok(mut last) = self.last.lock() {
            // Unless a newer pass of these rows came in meanwhile.
            if last.iter().all(|l| l.data != kept.data) {
                last.push(kept);
            } else if let Ok(mut pool) = self.pool.lock() {
                pool.push((kept.ws, kept.r));
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
        let remember = self.remember;
        let (mut ws, mut r) = self.take_workspace();
        self.residuals(theta, data, u, &mut ws, &mut r);
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
        self.dec
            .backward(theta, &mut ws, &r, grad_theta, Some(grad_u));
        for (g, uu) in grad_u.iter_mut().zip(u) {
            *g -= uu;
        }
        if remember {
            self.keep_pass(theta, data, u, ws, r);
        } else if let Ok(mut p) = self.pool.lock() {
            p.push((ws, r));
        }
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
        self.with_workspace(|ws, r| {
            self.residuals(theta, &data, &u, ws, r);
            // ∇θ Σ log p = Σ J_θᵀ (x − h).
            self.dec.backward(theta, ws, r, Some(grad_theta), None);
        });
        Ok(())
    }
}
