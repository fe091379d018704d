//! The decoder's likelihood p(x | h), h = h_θ(u) the decoder's output for a data point: how the
//! point's coordinates follow from it, one coordinate at a time. The bound estimators (ELBO, IWAE)
//! and the chain estimators (HMC, SAGD) of [`crate::train`] and the posterior
//! [`crate::vae::DecoderPosterior`] read it as a parameter, so a VAE of real values, binary pixels
//! or counts trains through the same estimators; a user's own law is one small `impl`.

/// A likelihood that factorises over the data's coordinates: log p(x | h) = Σ_j ℓ(h_j; x_j).
///
/// Constants that depend on neither θ nor u may be dropped (the estimators' gradients do not
/// see them; their losses then differ from the log-likelihood by them).
pub trait Likelihood: Send + Sync {
    /// ℓ(h; x) for one coordinate, and its derivative ∂ℓ/∂h.
    fn log_density(&self, h: f32, x: f32) -> (f32, f32);

    /// The same law as the CUDA backend's kernels compute it, where they know it: every law of
    /// this module has one, so its estimators run on a GPU too. `None` (the default, a law of
    /// one's own): the estimators run on the CPU alone, and a GPU refuses the law by name.
    fn device_law(&self) -> Option<DeviceLaw> {
        None
    }
}

/// A likelihood as the CUDA backend computes it, one coordinate per thread: the laws of this
/// module, by [`Likelihood::device_law`]. New laws may be added.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum DeviceLaw {
    /// N(h, σ² I), given by 1/σ² ([`UnitGaussian`]: 1, [`Gaussian`]).
    Gaussian {
        /// 1/σ².
        precision: f32,
    },
    /// Bernoulli(σ(h)), h the logits ([`Bernoulli`]).
    Bernoulli,
    /// Poisson(e^h), h the log-rates ([`Poisson`]).
    Poisson,
}

impl DeviceLaw {
    /// The kernels' code of the law and its one parameter (1/σ², or 0).
    pub(crate) fn code(self) -> (i32, f32) {
        match self {
            DeviceLaw::Gaussian { precision } => (0, precision),
            DeviceLaw::Bernoulli => (1, 0.0),
            DeviceLaw::Poisson => (2, 0.0),
        }
    }

    /// Whether this is the paper's N(h, I), which the fused kernel of a small decoder's
    /// posterior computes.
    pub(crate) fn is_unit_gaussian(self) -> bool {
        self == DeviceLaw::Gaussian { precision: 1.0 }
    }
}

/// X | U ~ N(h_θ(U), I), the paper's debiased VAE: ℓ = −½ (x − h)², ∂ℓ/∂h = x − h (the
/// constant −½ log 2π dropped). The default of every estimator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitGaussian;

impl Likelihood for UnitGaussian {
    #[inline(always)]
    fn log_density(&self, h: f32, x: f32) -> (f32, f32) {
        let r = x - h;
        (-0.5 * r * r, r)
    }

    fn device_law(&self) -> Option<DeviceLaw> {
        Some(DeviceLaw::Gaussian { precision: 1.0 })
    }
}

/// X | U ~ N(h_θ(U), σ² I) for a known noise sd σ: ℓ = −(x − h)²/(2σ²), ∂ℓ/∂h = (x − h)/σ² (the
/// constant −log σ − ½ log 2π dropped). Built by [`Gaussian::new`], which refuses an sd that is not
/// positive and finite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gaussian {
    /// 1/σ².
    precision: f32,
}

impl Gaussian {
    /// The likelihood of noise sd `sd`; refused, by name, unless `sd` is positive and finite (and
    /// 1/σ² is too, in f32).
    pub fn new(sd: f64) -> sagd::error::Result<Self> {
        let precision = (1.0 / (sd * sd)) as f32;
        if sd > 0.0 && sd.is_finite() && precision.is_finite() && precision > 0.0 {
            return Ok(Gaussian { precision });
        }
        Err(sagd::error::SagdError::InvalidSetting {
            name: "Gaussian sd",
            value: sd.to_string(),
            fix: "give the noise's standard deviation, positive and finite (between about 1e-19 and 1e19)".into(),
        })
    }
}

impl Likelihood for Gaussian {
    #[inline(always)]
    fn log_density(&self, h: f32, x: f32) -> (f32, f32) {
        let r = x - h;
        let g = self.precision * r;
        (-0.5 * g * r, g)
    }

    fn device_law(&self) -> Option<DeviceLaw> {
        Some(DeviceLaw::Gaussian {
            precision: self.precision,
        })
    }
}

/// X_j | U ~ Bernoulli(σ(h_j)), h the logits (E3's model of binary images): ℓ = x h −
/// softplus(h), stable for any logit, ∂ℓ/∂h = x − σ(h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bernoulli;

impl Likelihood for Bernoulli {
    #[inline(always)]
    fn log_density(&self, h: f32, x: f32) -> (f32, f32) {
        let (sp, sg) = crate::math::softplus_sigmoid(h);
        (x * h - sp, x - sg)
    }

    fn device_law(&self) -> Option<DeviceLaw> {
        Some(DeviceLaw::Bernoulli)
    }
}

/// X_j | U ~ Poisson(e^{h_j}), h the log-rates (counts): ℓ = x h − e^h, ∂ℓ/∂h = x − e^h (the
/// constant −log x! dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Poisson;

impl Likelihood for Poisson {
    #[inline(always)]
    fn log_density(&self, h: f32, x: f32) -> (f32, f32) {
        let rate = h.exp();
        (x * h - rate, x - rate)
    }

    fn device_law(&self) -> Option<DeviceLaw> {
        Some(DeviceLaw::Poisson)
    }
}

/// Σ_j ℓ(h_j; x_j) over one point's coordinates (summed in order, in f32), with each ∂ℓ/∂h_j
/// written into `grad`.
pub(crate) fn row<L: Likelihood + ?Sized>(lik: &L, h: &[f32], x: &[f32], grad: &mut [f32]) -> f32 {
    // From −0.0, as f32's `Sum`: the same bits as a sum of the terms.
    let mut total = -0.0f32;
    for ((g, &h), &x) in grad.iter_mut().zip(h).zip(x) {
        let (l, d) = lik.log_density(h, x);
        total += l;
        *g = d;
    }
    total
}
