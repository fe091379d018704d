//! E3's gradient estimator: the VAE's or SAGD's minibatch pass on either engine, with each
//! update's binarised images and noise drawn from per-purpose streams (ahead, on a second thread,
//! when a GPU runs the pass), and the whole update on the device where the rule allows it.

use super::*;

/// What a training phase of E3 optimises.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Objective {
    /// The negative ELBO, both networks.
    Vae,
    /// SAGD's generator gradient from Langevin chains; the encoder frozen (it only starts them).
    Sagd(Chains),
}

/// The gradient of an E3 phase on minibatches of training images, freshly binarised each time.
pub struct E3Estimator<'a> {
    model: &'a E3,
    images: &'a [u8],
    objective: Objective,
    streams: Streams,
    engine: Engine,
    x: Vec<f32>,
    noise: Vec<f32>,
    /// The next update's draws, made while the GPU works on this one.
    ahead: Option<Ahead>,
}

/// An update's draws: a binarisation's uniforms and the pass's normals, with the streams after
/// them. Made ahead for the next update on the GPU, and taken when it asks for as many; otherwise
/// dropped and drawn afresh from the estimator's streams, which stay those after the draws used
/// (the checkpointed state): the same draws, in the same order, as drawing in turn.
struct Ahead {
    uniforms: Vec<f32>,
    normals: Vec<f32>,
    after: Streams,
}

/// Where an estimator's passes run. Both draw the same binarisations and noise on the host.
enum Engine {
    /// The CPU engine, its buffers.
    Cpu(Scratch),
    /// A GPU.
    Gpu(Box<GpuE3>),
}

/// The estimator's random streams (its checkpointed state).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Streams {
    binarise: Xoshiro256PlusPlus,
    normals: NormalStream,
}

impl<'a> E3Estimator<'a> {
    /// The estimator of `objective` on `images` (n × 784 grey levels), its streams from `seed`,
    /// on the CPU engine.
    pub fn new(model: &'a E3, images: &'a [u8], objective: Objective, seed: u64) -> Self {
        E3Estimator {
            model,
            images,
            objective,
            streams: Streams {
                binarise: Xoshiro256PlusPlus::seed_from_u64(stream_seed(seed, 1)),
                normals: NormalStream::new(stream_seed(seed, 2)),
            },
            engine: Engine::Cpu(Scratch::default()),
            x: Vec::new(),
            noise: Vec::new(),
            ahead: None,
        }
    }

    /// The same estimator on `device` (the same draws: a GPU computes the CPU's gradients to
    /// float rounding).
    pub fn on(
        device: Device,
        model: &'a E3,
        images: &'a [u8],
        objective: Objective,
        seed: u64,
    ) -> Result<Self> {
        let mut est = Self::new(model, images, objective, seed);
        if let (Device::Cuda(_), Some(_)) = (device, sagd::share::current()) {
            return Err(SagdError::InvalidSetting {
                name: "device",
                value: format!("{device} on {} processes", sagd::share::size()),
                fix: "E3's passes split over processes on the CPU engine only: run on a GPU as one process, or on several processes with --device cpu".into(),
            });
        }
        if let Device::Cuda(i) = device {
            est.engine = Engine::Gpu(Box::new(GpuE3::new(Gpu::open(i)?)));
        }
        Ok(est)
    }
}

impl E3Estimator<'_> {
    /// The minibatch's fresh binarisation into `x` and the pass's noise into `noise`, from the
    /// estimator's streams (the same draws for either engine).
    fn draw(&mut self, batch: &[usize]) {
        let mut pixels = Vec::with_capacity(batch.len() * PIXELS);
        for &i in batch {
            pixels.extend_from_slice(&self.images[i * PIXELS..(i + 1) * PIXELS]);
        }
        let len = self.noise_len(batch.len());
        let draws = match self.ahead.take() {
            Some(a) if a.uniforms.len() == pixels.len() && a.normals.len() == len => a,
            _ => Ahead::draw(&self.streams, batch.len(), len),
        };
        self.streams = draws.after;
        self.x = binarise_with(&pixels, &draws.uniforms);
        self.noise = draws.normals;
    }

    /// Normals per pass over `images` images.
    fn noise_len(&self, images: usize) -> usize {
        match &self.objective {
            Objective::Vae => images * self.model.d,
            Objective::Sagd(chains) => sagd_noise_len(self.model, chains, images),
        }
    }
}

impl Ahead {
    /// The draws of an update over `images` images with `normals` normals, from a copy of
    /// `streams` (which do not move).
    fn draw(streams: &Streams, images: usize, normals: usize) -> Self {
        let mut after = streams.clone();
        let uniforms = uniforms(&mut after.binarise, images * PIXELS);
        let mut z = vec![0.0f32; normals];
        after.normals.fill(&mut z);
        Ahead {
            uniforms,
            normals: z,
            after,
        }
    }
}

/// A pass's loss, or the error that stops a run whose networks overflowed.
fn finite_loss(loss: f64) -> Result<f64> {
    if loss.is_finite() {
        Ok(loss)
    } else {
        Err(SagdError::NonFiniteUpdate { iteration: 0 })
    }
}

impl GradientEstimator for E3Estimator<'_> {
    fn trains_encoder(&self) -> bool {
        self.objective == Objective::Vae
    }

    fn estimate(
        &mut self,
        p: &VaeParams,
        batch: &[usize],
        g_dec: &mut [f32],
        g_enc: &mut [f32],
    ) -> Result<f64> {
        self.draw(batch);
        let (m, x, noise) = (self.model, &self.x, &self.noise);
        let info = match (self.objective, &mut self.engine) {
            (Objective::Vae, Engine::Cpu(scratch)) => {
                vae_batch(m, p, x, noise, g_dec, g_enc, scratch)?
            }
            (Objective::Vae, Engine::Gpu(gpu)) => gpu.vae_batch(m, p, x, noise, g_dec, g_enc)?,
            (Objective::Sagd(chains), Engine::Cpu(scratch)) => {
                sagd_batch(m, p, x, &chains, noise, g_dec, scratch)?
            }
            (Objective::Sagd(chains), Engine::Gpu(gpu)) => {
                gpu.sagd_batch(m, p, x, &chains, noise, g_dec)?
            }
        };
        finite_loss(info.loss)
    }

    fn device_update(
        &mut self,
        st: &TrainState,
        batch: &[usize],
        step: AdamStep,
    ) -> Option<Result<f64>> {
        if let Engine::Cpu(_) = self.engine {
            return None;
        }
        self.draw(batch);
        let what = match &self.objective {
            Objective::Vae => E3Pass::Vae,
            Objective::Sagd(chains) => E3Pass::Sagd(chains),
        };
        // A second thread draws the next update's binarisation and noise while the GPU runs
        // this one from this thread (where its context is current).
        let len = self.noise_len(batch.len());
        let (result, ahead) = {
            let Engine::Gpu(gpu) = &mut self.engine else {
                return None;
            };
            let (model, x, noise) = (self.model, &self.x, &self.noise);
            let streams = &self.streams;
            std::thread::scope(|s| {
                let ahead = s.spawn(|| Ahead::draw(streams, batch.len(), len));
                let result = gpu.train_step(model, st, x, noise, what, step);
                (result, ahead.join())
            })
        };
        // A draw that failed to finish is simply made again in turn.
        self.ahead = ahead.ok();
        Some(match result {
            Err(e) => Err(e.into()),
            Ok((info, _)) if !info.loss.is_finite() => finite_loss(info.loss),
            Ok((_, false)) => Err(SagdError::NonFiniteUpdate {
                iteration: st.updates + 1,
            }),
            Ok((info, true)) => Ok(info.loss),
        })
    }

    fn device_sync(&mut self, st: &mut TrainState) -> Result<()> {
        match &mut self.engine {
            Engine::Cpu(_) => Ok(()),
            Engine::Gpu(gpu) => Ok(gpu.sync(st)?),
        }
    }

    fn save_state(&self) -> Result<Vec<u8>> {
        encode(&self.streams)
    }

    fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        self.streams = decode(bytes)?;
        self.ahead = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_made_ahead_are_the_draws_in_turn() {
        let model = E3::new(20);
        let images: Vec<u8> = (0..4 * PIXELS).map(|i| (i * 37 % 256) as u8).collect();
        let objective = Objective::Sagd(Chains::default());
        let batches: [&[usize]; 4] = [&[0, 1], &[2, 3], &[1], &[3]];
        // In turn.
        let mut a = E3Estimator::new(&model, &images, objective, 7);
        let turn: Vec<_> = batches
            .iter()
            .map(|b| {
                a.draw(b);
                (a.x.clone(), a.noise.clone(), a.streams.clone())
            })
            .collect();
        // Each update's draws made ahead for the next update's size: taken where the sizes
        // agree (the second and fourth), dropped where they do not (the third).
        let mut b = E3Estimator::new(&model, &images, objective, 7);
        for (k, batch) in batches.iter().enumerate() {
            b.draw(batch);
            assert_eq!(
                (&b.x, &b.noise, &b.streams),
                (&turn[k].0, &turn[k].1, &turn[k].2)
            );
            let len = b.noise_len(batch.len());
            b.ahead = Some(Ahead::draw(&b.streams, batch.len(), len));
            // Its streams stay those of the draws used: what a checkpoint saves.
            assert_eq!(b.streams, turn[k].2);
        }
    }
}
