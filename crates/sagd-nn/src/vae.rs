//! The debiased VAE of the paper: U ~ N(0, I), Z = h_θ(U), X | U ~ N(h_θ(U), I), with an encoder
//! q_φ(u | x) = N(μ_φ(x), diag σ²_φ(x)); or X | U from another [`Likelihood`] of the decoder's
//! output. The decoder's posterior p(u | x; θ) is a [`LatentModel`] whose ∇u and ∇θ come from the
//! engine, so the core crate's chains, HMC and SAGD run on it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sagd::error::LogpError;
use sagd::model::LatentModel;
use sagd::rng::Seed;

use crate::likelihood::{self, Likelihood, UnitGaussian};
use crate::math::Activation;
use crate::net::{Sequential, Workspace, WorkspacePool};

/// Decoder and encoder shapes: MLPs d → h → h → d and d → h → h → 2d with softplus hidden layers.
#[derive(Clone, Debug, PartialEq)]
pub struct Vae {
    /// Latent dimension (the data's too, for the paper's networks; in general the data's is the
    /// decoder's output, [`Vae::data_dim`]).
    pub d: usize,
    /// h_θ: d latent values in, [`Vae::data_dim`] out.
    pub dec: Sequential,
    /// (μ_φ, log σ²_φ): a data point in, 2d out.
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

    /// Values per data point: the decoder's outputs (d for the paper's networks).
    pub fn data_dim(&self) -> usize {
        self.dec.output_dim()
    }

    /// Refused, by name, unless the networks fit: the decoder reads d latent values, the encoder
    /// reads the decoder's outputs and gives μ and log σ² for each latent dimension.
    pub fn check(&self) -> sagd::error::Result<()> {
        check_networks(self.d, "decoder", &self.dec, &self.enc)
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

/// Refused, by name, unless a decoder `dec` (called `name`) and an encoder `enc` make a VAE of
/// `d` latent dimensions: the decoder reads d values and gives at least one, the encoder reads the
/// decoder's outputs and gives μ and log σ² for each latent dimension.
pub(crate) fn check_networks(
    d: usize,
    name: &'static str,
    dec: &Sequential,
    enc: &Sequential,
) -> sagd::error::Result<()> {
    let refuse = |name, value: String, fix: String| {
        Err(sagd::error::SagdError::InvalidSetting { name, value, fix })
    };
    if d == 0 || dec.input_dim() != d || dec.output_dim() == 0 {
        return refuse(
            name,
            format!("{} → {}", dec.input_dim(), dec.output_dim()),
            format!("give the {name} d = {d} latent inputs (at least one) and at least one output"),
        );
    }
    if enc.input_dim() != dec.output_dim() {
        return refuse(
            "encoder",
            format!("{} inputs", enc.input_dim()),
            format!(
                "the encoder reads the {name}'s outputs (the data points): give it {} inputs",
                dec.output_dim()
            ),
        );
    }
    if enc.output_dim() != 2 * d {
        return refuse(
            "encoder",
            format!("{} outputs", enc.output_dim()),
            format!("the encoder gives μ and log σ² for {d} latent dimensions: 2·{d} outputs"),
        );
    }
    Ok(())
}

/// A forward pass kept for a later θ-gradient at the same points.
struct LastPass {
    theta: Vec<f32>,
    data: Vec<usize>,
    u: Vec<f32>,
    ws: Workspace,
    r: Vec<f32>,
}

/// The posterior p(u | x_i; θ) ∝ N(u; 0, I) p(x_i | h_θ(u)) over a data set, as a [`LatentModel`]
/// (constants dropped); by default the paper's p(x | h) = N(x; h, I), so that log p = −½‖u‖² −
/// ½‖x_i − h_θ(u)‖², or any [`Likelihood`] ([`DecoderPosterior::with_likelihood`]).
pub struct DecoderPosterior<'a, L: Likelihood + ?Sized = UnitGaussian> {
    dec: &'a Sequential,
    lik: &'a L,
    x: &'a [f32],
    /// Latent values and data values per point.
    d: usize,
    px: usize,
    /// Each worker thread's forward-pass buffers and ∂ log p(x | h)/∂h.
    pool: WorkspacePool<(Workspace, Vec<f32>)>,
    remember: bool,
    reused: AtomicUsize,
    /// The last forward pass of each block of rows, in the slot of the block's first row (see
    /// [`DecoderPosterior::keeping_passes`]): one lock per block, so blocks never wait on each
    /// other.
    last: Vec<Mutex<Option<LastPass>>>,
}

impl<'a> DecoderPosterior<'a> {
    /// The posterior of decoder `dec` for data `x` (n × d, row-major) under the paper's
    /// likelihood, N(x; h, I).
    pub fn new(dec: &'a Sequential, x: &'a [f32]) -> Self {
        DecoderPosterior::with_likelihood(dec, &UnitGaussian, x)
    }
}

impl<'a, L: Likelihood + ?Sized> DecoderPosterior<'a, L> {
    /// The posterior of decoder `dec` for data `x` (n points of the decoder's outputs,
    /// row-major) under the likelihood `lik`.
    pub fn with_likelihood(dec: &'a Sequential, lik: &'a L, x: &'a [f32]) -> Self {
        let mut pool = WorkspacePool::default();
        pool.ensure(rayon::current_num_threads());
        DecoderPosterior {
            dec,
            lik,
            x,
            d: dec.input_dim(),
            px: dec.output_dim(),
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
        let n = if on { self.x.len() / self.px.max(1) } else { 0 };
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
        let (d, px) = (self.d, self.px);
        let slot = self.slot(data)?;
        // Out of its slot while in use; compared outside the lock.
        let mut kept = slot.lock().ok()?.take()?;
        if kept.data != data || kept.theta != theta {
            return None;
        }
        let mut stale = Vec::new();
        let mut r = kept.r.clone();
        for (k, ((rr, now), then)) in r
            .chunks_exact_mut(px)
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
        // A rejected proposal far out (HMC at a step much too large) may have overflowed its
        // pass: then the rows are evaluated afresh instead.
        if !self.dec.rows_finite(&kept.ws, &stale) {
            return None;
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
            self.residuals(theta, data, u, ws, r, Some(&mut *logp));
            for (lp, uu) in logp.iter_mut().zip(u.chunks_exact(d)) {
                // log p(x | h) − ½‖u‖² (for N(x; h, I), −½ (‖x − h‖² + ‖u‖²) to the bit: halving is
                // exact).
                *lp += -0.5 * uu.iter().map(|v| v * v).sum::<f32>();
            }
            // With r = ∂ log p(x | h)/∂h (x − h for N(x; h, I)): ∇u = J_hᵀ r − u; ∇θ = Σ J_θᵀ r
            // from the same pass.
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

    /// Forward pass at u; leaves ∂ log p(x | h)/∂h in `r` (the residuals x − h(u) for N(x; h, I))
    /// and, where asked, each row's log p(x | h) in `logp`.
    fn residuals(
        &self,
        theta: &[f32],
        data: &[usize],
        u: &[f32],
        ws: &mut Workspace,
        r: &mut Vec<f32>,
        logp: Option<&mut [f32]>,
    ) {
        let px = self.px;
        let rows = data.len();
        self.dec.forward(theta, u, rows, ws);
        r.resize(rows * px, 0.0);
        let rows = r.chunks_exact_mut(px).zip(ws.output().chunks_exact(px));
        let mut logp = logp.map(|l| l.iter_mut());
        for ((rr, h), &i) in rows.zip(data) {
            let l = likelihood::row(self.lik, h, &self.x[i * px..(i + 1) * px], rr);
            if let Some(lp) = logp.as_mut().and_then(|l| l.next()) {
                *lp = l;
            }
        }
    }
}

impl<L: Likelihood + ?Sized> LatentModel<f32> for DecoderPosterior<'_, L> {
    fn n_data(&self) -> usize {
        self.x.len() / self.px.max(1)
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
            self.residuals(theta, &data, &u, ws, r, None);
            // ∇θ Σ log p = Σ J_θᵀ ∂ log p(x | h)/∂h.
            self.dec.backward(theta, ws, r, Some(grad_theta), None);
        });
        Ok(())
    }
}
