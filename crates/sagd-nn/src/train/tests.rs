//! The training job on estimators made for the test: Adam's steps on a constant gradient,
//! averaging, a decaying rate, and a pretend device that keeps the training state, through a
//! resume.

use super::*;

/// A gradient of 1 on every decoder parameter: Adam then moves each by −lr per update.
struct Constant;
impl GradientEstimator for Constant {
    fn trains_encoder(&self) -> bool {
        false
    }
    fn estimate(
        &mut self,
        _p: &VaeParams,
        _b: &[usize],
        g: &mut [f32],
        _e: &mut [f32],
    ) -> Result<f64> {
        g.iter_mut().for_each(|v| *v += 1.0);
        Ok(0.0)
    }
    fn save_state(&self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
    fn load_state(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
}

/// The parameters returned after `updates` full-batch updates on the [`Constant`] gradient
/// from the initial `p0` of a small VAE.
fn on_constant(
    p0: &VaeParams,
    updates: usize,
    lr: f64,
    lr_decay: f64,
    averaging: Averaging,
) -> VaeParams {
    let vae = Vae::new(1, 2);
    let s = TrainSettings {
        epochs: updates,
        batch_size: 4,
        lr,
        lr_decay,
        averaging,
    };
    let mut est = Constant;
    let mut job = Training::new(&vae, &mut est, &s, 4, Identity::new()).unwrap();
    let mut st = job.init(p0.clone(), 0);
    while !job.terminate(&st) {
        job.next_iter(&mut st).unwrap();
    }
    job.finish(&st)
}

#[test]
fn tail_averaging_returns_the_mean_of_the_last_iterates() {
    let p0 = Vae::new(1, 2).init(1);
    let (lr, updates) = (0.01, 10);
    let last = on_constant(&p0, updates, lr, 0.0, Averaging::None);
    let avg = on_constant(&p0, updates, lr, 0.0, Averaging::Tail { fraction: 0.5 });
    for ((a, l), z) in avg.dec.iter().zip(&last.dec).zip(&p0.dec) {
        // Iterates z − lr·t (Adam's first steps on a constant gradient are lr each); the last
        // five, t = 6..10, average to z − 8·lr.
        assert!((l - (z - 10.0 * lr as f32)).abs() < 1e-5, "{l} vs {z}");
        assert!((a - (z - 8.0 * lr as f32)).abs() < 1e-5, "{a} vs {z}");
    }
    assert_eq!(avg.enc, p0.enc);
}

#[test]
fn a_decaying_learning_rate_takes_steps_of_lr_over_a_power_of_the_update() {
    // On a constant gradient Adam's steps are the learning rate itself: after 10 updates at
    // lr (1 + t)^−½ the iterate has moved by Σ_t lr/√(1 + t).
    let p0 = Vae::new(1, 2).init(1);
    let last = on_constant(&p0, 10, 0.01, 0.5, Averaging::None);
    let moved: f64 = (0..10).map(|t| 0.01 / (1.0 + t as f64).sqrt()).sum();
    for (l, z) in last.dec.iter().zip(&p0.dec) {
        assert!((l - (z - moved as f32)).abs() < 1e-5, "{l} vs {z}");
    }
}

/// The quadratic loss ½‖θ − ½‖² on the decoder: gradient θ − ½. On a pretend device
/// ([`Where`]), its own copies of θ and Adam's moments, the step computed from [`AdamStep`]
/// alone, as the GPU's kernel does.
/// What the pretend device holds: of which update, θ, m and v.
type Held = (usize, Vec<f32>, Vec<f64>, Vec<f64>);

/// Where the quadratic's updates are taken.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Where {
    Host,
    /// The device, driven by the training job ([`GradientEstimator::device_params`]).
    Device,
    /// The device, the estimator taking the whole update itself (the deprecated
    /// `device_update`), as [`on_device`] would.
    WholeUpdate,
}

struct Quadratic {
    at: Where,
    held: Option<Held>,
    grad: Vec<f32>,
    loads: usize,
}
impl DeviceParams for Quadratic {
    fn held(&self, _encoder: bool) -> Option<usize> {
        self.held.as_ref().map(|h| h.0)
    }
    fn load(&mut self, st: &TrainState, _encoder: bool) -> Result<()> {
        self.loads += 1;
        let o = &st.dec.opt;
        self.held = Some((st.updates, st.params.dec.clone(), o.m.clone(), o.v.clone()));
        Ok(())
    }
    fn gradient(&mut self, _b: &[usize]) -> Result<f64> {
        let (_, th, _, _) = self.held.as_ref().expect("loaded");
        self.grad = th.iter().map(|t| t - 0.5).collect();
        Ok(0.0)
    }
    fn finite(&mut self) -> Result<bool> {
        Ok(self.grad.iter().all(|g| g.is_finite()))
    }
    fn step(&mut self, s: AdamStep) -> Result<()> {
        let (n, th, m, v) = self.held.as_mut().expect("loaded");
        let (c1, c2) = (
            1.0 - s.beta1.powi(s.t.0 as i32),
            1.0 - s.beta2.powi(s.t.0 as i32),
        );
        for (((t, m), v), g) in th
            .iter_mut()
            .zip(m.iter_mut())
            .zip(v.iter_mut())
            .zip(&self.grad)
        {
            let g = *g as f64;
            *m = s.beta1 * *m + (1.0 - s.beta1) * g;
            *v = s.beta2 * *v + (1.0 - s.beta2) * g * g;
            // The host's Adam: the direction in f32 from the moments rounded to f32.
            let d = (*m as f32 / c1 as f32) / ((*v as f32 / c2 as f32).sqrt() + s.eps as f32);
            *t -= (s.lr * d as f64) as f32;
        }
        *n += 1;
        Ok(())
    }
    fn sync(&mut self, st: &mut TrainState) -> Result<()> {
        if let Some((n, th, m, v)) = &self.held {
            if *n == st.updates {
                st.params.dec.clone_from(th);
                st.dec.opt.m.clone_from(m);
                st.dec.opt.v.clone_from(v);
            }
        }
        Ok(())
    }
}
impl GradientEstimator for Quadratic {
    fn trains_encoder(&self) -> bool {
        false
    }
    fn estimate(
        &mut self,
        p: &VaeParams,
        _b: &[usize],
        g: &mut [f32],
        _e: &mut [f32],
    ) -> Result<f64> {
        g.iter_mut().zip(&p.dec).for_each(|(g, t)| *g += t - 0.5);
        Ok(0.0)
    }
    fn save_state(&self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
    fn load_state(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn device_params(&mut self) -> Option<&mut dyn DeviceParams> {
        match self.at {
            Where::Device => Some(self),
            _ => None,
        }
    }
    fn device_update(&mut self, st: &TrainState, b: &[usize], s: AdamStep) -> Option<Result<f64>> {
        (self.at == Where::WholeUpdate).then(|| on_device(self, st, b, s, false))
    }
    fn device_sync(&mut self, st: &mut TrainState) -> Result<()> {
        DeviceParams::sync(self, st)
    }
}

#[test]
fn a_device_that_takes_the_updates_ends_where_the_host_does_through_a_resume() {
    use sagd::run::{Control, Runner};
    let vae = Vae::new(1, 3);
    let p0 = vae.init(2);
    let s = TrainSettings {
        epochs: 9,
        batch_size: 4,
        lr: 0.05,
        lr_decay: 0.0,
        averaging: Averaging::None,
    };
    let dir = tempfile::tempdir().unwrap();
    // stop_at: an observer stops the run there (checkpointed), and the run is resumed.
    let quadratic = |at: Where| Quadratic {
        at,
        held: None,
        grad: Vec::new(),
        loads: 0,
    };
    let run = |at: Where, stop_at: Option<usize>| {
        let mut est = quadratic(at);
        let path = dir.path().join(format!("{at:?}-{stop_at:?}.ckpt"));
        let mut st = {
            let job = Training::new(&vae, &mut est, &s, 4, Identity::new()).unwrap();
            let st = job.init(p0.clone(), 0);
            let mut stop = |st: &TrainState, _: &TrainInfo| match stop_at {
                Some(k) if st.updates == k => Control::Stop,
                _ => Control::Continue,
            };
            let mut runner = Runner::new(job).checkpoint(&path, 100).observe(&mut stop);
            let mut st = st;
            runner.run(&mut st).unwrap();
            st
        };
        let mut loads = est.loads;
        if stop_at.is_some() {
            // A new process: a fresh device, loaded from the checkpoint's state.
            let mut est = quadratic(at);
            let job = Training::new(&vae, &mut est, &s, 4, Identity::new()).unwrap();
            let mut go = |_: &TrainState, _: &TrainInfo| Control::Continue;
            let mut runner = Runner::new(job).checkpoint(&path, 100).observe(&mut go);
            st = runner.resume(&path).unwrap();
            runner.run(&mut st).unwrap();
            drop(runner);
            loads += est.loads;
        }
        (st, loads)
    };
    let (host, _) = run(Where::Host, None);
    let mut ends = Vec::new();
    for at in [Where::Device, Where::WholeUpdate] {
        // Loaded once, and once more after the resume: the job keeps the device's copy.
        let (dev, loads) = run(at, None);
        let (resumed, loads_resumed) = run(at, Some(4));
        assert_eq!((loads, loads_resumed), (1, 2), "{at:?}");
        ends.extend([dev, resumed]);
    }
    assert_eq!(host.updates, 9);
    for st in &ends {
        assert_eq!(st.params, host.params);
        assert_eq!((st.dec.count, st.dec.opt.count), (9, 9));
        assert_eq!(st.dec.opt.m, host.dec.opt.m);
        assert_eq!(st.dec.opt.v, host.dec.opt.v);
    }
    assert_ne!(host.params.dec, p0.dec);
}
