//! E3's settings (the default fits 2 cores; `paper()` the paper's epochs), their validation, and
//! how a run is carried out.

use super::*;

/// Settings of E3. The default fits a 2-core machine in about half an hour (see
/// [`E3Settings::paper`] for the paper's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct E3Settings {
    /// Latent dimension (paper: 20).
    pub latent: usize,
    /// Training images used (the first ones; MNIST has 60000).
    pub train_n: usize,
    /// Minibatch size (paper: 200).
    pub batch_size: usize,
    /// VAE pre-training epochs (paper: 500).
    pub vae_epochs: usize,
    /// Adam's learning rate for the VAE (and the control).
    pub vae_lr: f64,
    /// SAGD refinement: generator updates (paper: 100 epochs = 30000).
    pub sagd_updates: usize,
    /// Adam's learning rate for SAGD.
    pub sagd_lr: f64,
    /// SAGD's chains.
    pub chains: Chains,
    /// Test images evaluated (the first ones, binarised once).
    pub eval_n: usize,
    /// Importance-sampling draws per test image.
    pub eval_k: usize,
    /// Seed of everything (streams derived from it).
    pub seed: u64,
}

impl Default for E3Settings {
    /// 20 VAE epochs on all 60000 images (≈ 12 min on 2 cores), 240 SAGD updates (0.8 epoch,
    /// ≈ 15 min), the control's 240 VAE updates, 500 test images with 1000 draws each.
    fn default() -> Self {
        E3Settings {
            latent: 20,
            train_n: 60000,
            batch_size: 200,
            vae_epochs: 20,
            vae_lr: 1e-3,
            sagd_updates: 240,
            sagd_lr: 1e-4,
            chains: Chains::default(),
            eval_n: 500,
            eval_k: 1000,
            seed: 0,
        }
    }
}

impl E3Settings {
    /// The paper's: 500 VAE epochs and 100 SAGD epochs of 300 minibatches of 200.
    pub fn paper() -> Self {
        E3Settings {
            vae_epochs: 500,
            sagd_updates: 100 * 300,
            ..E3Settings::default()
        }
    }

    /// Checks the settings against the data (`train` and `test` images available).
    pub fn validate(&self, train: usize, test: usize) -> Result<()> {
        let bad = |name: &'static str, value: String, fix: String| {
            Err(SagdError::InvalidSetting { name, value, fix })
        };
        if self.latent == 0 {
            return bad(
                "latent",
                "0".into(),
                "use a latent dimension of at least 1 (paper: 20)".into(),
            );
        }
        if self.train_n == 0 || self.train_n > train {
            return bad(
                "train_n",
                self.train_n.to_string(),
                format!("use between 1 and the {train} training images"),
            );
        }
        // No evaluation would be a table of NaN: the held-out likelihoods are E3's result.
        if self.eval_n == 0 || self.eval_n > test {
            return bad(
                "eval_n",
                self.eval_n.to_string(),
                format!("evaluate between 1 and the {test} test images (default 500)"),
            );
        }
        if self.batch_size == 0 {
            return bad(
                "batch_size",
                "0".into(),
                "use a minibatch of at least 1 image".into(),
            );
        }
        if self.eval_k == 0 && self.eval_n > 0 {
            return bad(
                "eval_k",
                "0".into(),
                "use at least 1 importance-sampling draw (1000 or more for a useful estimate)"
                    .into(),
            );
        }
        // The chains' own rules, where the estimator checks them too.
        self.chains.validate()?;
        sagd::error::positive(
            "vae_lr",
            self.vae_lr,
            "use a learning rate > 0, such as 1e-3",
        )?;
        sagd::error::positive(
            "sagd_lr",
            self.sagd_lr,
            "use a learning rate > 0, such as 1e-4",
        )
    }
}

/// How E3 runs, beside what it computes.
#[derive(Clone, Debug, Default)]
pub struct E3Options {
    /// Folder of the phases' checkpoints (written every `checkpoint_every` updates and at the end).
    pub checkpoint_dir: Option<PathBuf>,
    /// Updates between checkpoints.
    pub checkpoint_every: usize,
    /// Resume each phase from its checkpoint when there is one.
    pub resume: bool,
    /// The folder where pre-trained networks are kept: a second run with the same pre-training
    /// settings and data starts at the refinement.
    pub pretrained_cache: Option<PathBuf>,
    /// Stop (with an error naming the phase) after this many updates of this run: tests of resume.
    pub interrupt_after: Option<usize>,
    /// Where the training passes run (the held-out evaluation runs on the CPU engine).
    pub device: Device,
}
