//! The decoder's likelihood on the GPU, for every estimator that reads it (the bounds, E2's and
//! E3's chains): each row's log p(x | h) and ∂/∂h under any law the backend knows
//! ([`DeviceLaw`]), the prior's part of the decoder's posterior, and the two passes both chain
//! engines make through a decoder ([`DeviceDecoder`]): the posterior's gradient at the chains'
//! states, and ∇θ of the log-likelihood there.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::{grid, Gpu, GpuResult, GpuWorkspace};
use crate::likelihood::DeviceLaw;
use crate::net::Sequential;

/// Rows shorter than this take one thread each; longer ones a block each, its threads over the
/// row's coordinates.
const BLOCK_ROW: usize = 64;

/// The shape of [`Gpu::likelihood_rows`]: `rows` rows of `px` values, row r of data point
/// (r / `per`) mod `n`.
#[derive(Clone, Copy, Debug)]
pub struct LikelihoodRows {
    /// Rows of the decoder's output.
    pub rows: usize,
    /// Data points.
    pub n: usize,
    /// Consecutive rows per data point (a bound's k samples); 1 where row r is point r mod n.
    pub per: usize,
    /// Values per row (the data's dimension).
    pub px: usize,
}

impl Gpu {
    /// For each row r of the decoder's output `h` (`shape.rows` × `shape.px`) under `law`, its
    /// data point's log-likelihood into `ll[r]` (summed in f64; where `ll` is given) and
    /// `gscale` ∂ℓ/∂h into `dl`.
    pub fn likelihood_rows(
        &self,
        law: DeviceLaw,
        (h, x): (&CudaSlice<f32>, &CudaSlice<f32>),
        shape: LikelihoodRows,
        dl: &mut CudaSlice<f32>,
        ll: Option<&mut CudaSlice<f32>>,
        gscale: f32,
    ) -> GpuResult<()> {
        let (code, prec) = law.code();
        let LikelihoodRows { rows, n, per, px } = shape;
        if rows == 0 {
            return Ok(());
        }
        let by_thread = px < BLOCK_ROW;
        let cfg = if by_thread {
            grid(rows)
        } else {
            LaunchConfig {
                grid_dim: (rows as u32, 1, 1),
                block_dim: (px.next_power_of_two().min(256) as u32, 1, 1),
                shared_mem_bytes: 0,
            }
        };
        let (ri, ni, pi, xi) = (rows as i32, n as i32, per.max(1) as i32, px as i32);
        let bt = by_thread as i32;
        // A null device pointer: the kernel writes no log-likelihoods.
        let null: u64 = 0;
        match ll {
            Some(ll) => {
                // SAFETY: h and dl hold rows × px values, x n × px, ll rows.
                unsafe {
                    launch!(self, "likelihood_rows", cfg;
                        &code, &prec, h, x, &ri, &ni, &pi, &xi, dl, ll, &gscale, &bt)
                }?;
            }
            None => {
                // SAFETY: as above; a null ll is not written.
                unsafe {
                    launch!(self, "likelihood_rows", cfg;
                        &code, &prec, h, x, &ri, &ni, &pi, &xi, dl, &null, &gscale, &bt)
                }?;
            }
        }
        Ok(())
    }

    /// The prior N(u; 0, I)'s part of the decoder's posterior at the rows `u` (rows × d), after
    /// [`Gpu::likelihood_rows`] and the decoder's backward pass: `g` −= u, and `lp` −= ½‖u‖²
    /// where given.
    pub fn posterior_prior(
        &self,
        g: &mut CudaSlice<f32>,
        u: &CudaSlice<f32>,
        lp: Option<&mut CudaSlice<f32>>,
        (rows, d): (usize, usize),
    ) -> GpuResult<()> {
        let (ri, di) = (rows as i32, d as i32);
        let null: u64 = 0;
        match lp {
            Some(lp) => {
                // SAFETY: g and u hold rows × d values, lp rows.
                unsafe { launch!(self, "posterior_prior", grid(rows); g, u, lp, &ri, &di) }?;
            }
            None => {
                // SAFETY: as above; a null lp is not written.
                unsafe { launch!(self, "posterior_prior", grid(rows); g, u, &null, &ri, &di) }?;
            }
        }
        Ok(())
    }
}

/// A decoder on the device under a law, and the data its rows are scored against (`shape`: row
/// r of the states reads point r mod n): what the chains' passes evaluate.
pub(crate) struct DeviceDecoder<'a> {
    pub net: &'a Sequential,
    pub params: &'a CudaSlice<f32>,
    pub law: DeviceLaw,
    pub data: &'a CudaSlice<f32>,
    pub shape: LikelihoodRows,
}

impl DeviceDecoder<'_> {
    /// ∇u log p(u | x) = ∇u log p(x | u) − u at the states `u` (rows × d) into `g`, and log p(x |
    /// u) − ½‖u‖² into `lp` where given; `dl` (rows × px) and `ws` are the pass's scratch.
    pub(crate) fn posterior(
        &self,
        gpu: &Gpu,
        u: &CudaSlice<f32>,
        (g, mut lp): (&mut CudaSlice<f32>, Option<&mut CudaSlice<f32>>),
        dl: &mut CudaSlice<f32>,
        ws: &mut GpuWorkspace,
    ) -> GpuResult<()> {
        let rows = self.shape.rows;
        self.net.forward_gpu(gpu, self.params, u, rows, ws)?;
        let h = ws.output().expect("forward ran");
        let ll = lp.as_deref_mut();
        gpu.likelihood_rows(self.law, (h, self.data), self.shape, dl, ll, 1.0)?;
        self.net
            .backward_gpu(gpu, self.params, ws, dl, None, Some(&mut *g))?;
        gpu.posterior_prior(g, u, lp, (rows, self.net.input_dim()))
    }

    /// `gscale` ∇θ Σ_r log p(x | u_r) over the states `u` into `g` (overwritten), and each row's
    /// log-likelihood into `ll` where given; `dl` and `ws` as [`DeviceDecoder::posterior`]'s.
    pub(crate) fn theta_gradient(
        &self,
        gpu: &Gpu,
        u: &CudaSlice<f32>,
        (g, ll, gscale): (&mut CudaSlice<f32>, Option<&mut CudaSlice<f32>>, f32),
        dl: &mut CudaSlice<f32>,
        ws: &mut GpuWorkspace,
    ) -> GpuResult<()> {
        self.net
            .forward_gpu(gpu, self.params, u, self.shape.rows, ws)?;
        let h = ws.output().expect("forward ran");
        gpu.likelihood_rows(self.law, (h, self.data), self.shape, dl, ll, gscale)?;
        gpu.zero(g)?;
        self.net
            .backward_gpu(gpu, self.params, ws, dl, Some(g), None)
    }
}
