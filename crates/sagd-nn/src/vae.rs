//! The debiased VAE of the paper: U ~ N(0, I), Z = h_θ(U), X | U ~ N(h_θ(U), I), with an encoder
//! q_φ(u | x) = N(μ_φ(x), diag σ²_φ(x)). The decoder's posterior p(u | x; θ) is a [`LatentModel`]
//! whose ∇u and ∇θ come from the engine, so the core crate's chains, HMC and SAGD run on it.

use std::sync::atomic::{AtomicBool, Ordering};
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
#[derive(Clone, Debug, PartialEq)]
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

    /// Initial parameters (PyTorch's default law) from a seed.
    pub fn init(&self, seed: u64) -> VaeParams {
        VaeParams {
            dec: self.dec.init(seed),
            enc: self.enc.init(seed ^ 0x9E37_79B9_7F4A_7C15),
        }
    }
}

/// The posterior p(u | x_i; θ) ∝ N(u; 0, I) N(x_i; h_θ(u), I) over a data set, as a [`LatentModel`]
/// (constants dropped): log p = −½‖u‖² − ½‖x_i − h_θ(u)‖².
pub struct DecoderPosterior<'a> {
    dec: &'a Sequential,
    x: &'a [f32],
    d: usize,
    pool: Mutex<Vec<(Workspace, Vec<f32>)>>,
    fuse: AtomicBool,
    /// Fused θ-gradients per block of rows, keyed by the block's first data index and summed in
    /// that order, so that the sum does not depend on which thread finished first.
    theta_grad: Mutex<Vec<(usize, Vec<f32>)>>,
}

impl<'a> DecoderPosterior<'a> {
    /// The posterior of decoder `dec` for data `x` (n × d, row-major).
    pub fn new(dec: &'a Sequential, x: &'a [f32]) -> Self {
        DecoderPosterior {
            dec,
            x,
            d: dec.input_dim(),
            pool: Mutex::new(Vec::new()),
            fuse: AtomicBool::new(false),
            theta_grad: Mutex::new(Vec::new()),
        }
    }

    /// While on, every [`LatentModel::log_joint`] call also adds Σ_r ∇θ log p(x_i, u_r; θ) at the
    /// points it evaluates into an accumulator ([`DecoderPosterior::take_theta_grad`]): the same
    /// backward pass gives ∇u and ∇θ, so a Langevin scheme that evaluates the gradient at its new
    /// state gets the θ-gradient of SAGD without a second pass.
    pub fn fuse_theta_grad(&self, on: bool) {
        self.fuse.store(on, Ordering::SeqCst);
    }

    /// The accumulated θ-gradient since the last call (summed in block order), and resets it.
    pub fn take_theta_grad(&self, out: &mut [f32]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        if let Ok(mut parts) = self.theta_grad.lock() {
            parts.sort_by_key(|(k, _)| *k);
            for (_, g) in parts.drain(..) {
                out.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
            }
        }
    }

    fn with_workspace<R>(&self, f: impl FnOnce(&mut Workspace, &mut Vec<f32>) -> R) -> R {
        let mut w = self
            .pool
            .lock()
            .map(|mut p| p.pop())
            .unwrap_or(None)
            .unwrap_or_default();
        let r = f(&mut w.0, &mut w.1);
        if let Ok(mut p) = self.pool.lock() {
            p.push(w);
        }
        r
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
        let d = self.d;
        self.with_workspace(|ws, r| {
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
            // ∇u = J_hᵀ (x − h) − u.
            if self.fuse.load(Ordering::SeqCst) {
                let mut gt = vec![0.0f32; self.dec.n_params()];
                self.dec.backward(theta, ws, r, Some(&mut gt), Some(grad_u));
                if let Ok(mut acc) = self.theta_grad.lock() {
                    acc.push((data.first().copied().unwrap_or(0), gt));
                }
            } else {
                self.dec.backward(theta, ws, r, None, Some(grad_u));
            }
            for (g, uu) in grad_u.iter_mut().zip(u) {
                *g -= uu;
            }
        });
        Ok(())
    }
    fn add_grad_theta(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        grad_theta: &mut [f32],
    ) -> Result<(), LogpError> {
        self.with_workspace(|ws, r| {
            self.residuals(theta, data, u, ws, r);
            // ∇θ Σ log p = Σ J_θᵀ (x − h).
            self.dec.backward(theta, ws, r, Some(grad_theta), None);
        });
        Ok(())
    }
}
