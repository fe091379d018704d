//! Parameters saved and loaded as JSON, bit for bit, with the network's shape checked.

use super::*;

impl Sequential {
    /// Parameters as JSON: `{"format": "sagd-nn/1", "layers": [...], "params": [...]}`; f32 values
    /// are written in their shortest round-trip form, so reading them back gives the same bits.
    pub fn to_saved(&self, params: &[f32]) -> serde_json::Value {
        serde_json::json!({"format": "sagd-nn/1", "layers": self.layers, "params": params})
    }

    /// Parameters from [`Sequential::to_saved`]'s form, for a network of this shape.
    pub fn from_saved(&self, v: serde_json::Value) -> Result<Vec<f32>, SavedError> {
        #[derive(Deserialize)]
        struct Saved {
            format: String,
            layers: Vec<Layer>,
            params: Vec<f32>,
        }
        let s: Saved = serde_json::from_value(v).map_err(SavedError::NotParameters)?;
        if s.format != "sagd-nn/1" {
            return Err(SavedError::Format(s.format));
        }
        if s.layers != self.layers || s.params.len() != self.n_params {
            return Err(SavedError::Shape);
        }
        Ok(s.params)
    }

    /// Saves parameters as a file of [`Sequential::to_saved`]'s form.
    pub fn save(&self, params: &[f32], path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_saved(params).to_string())
    }

    /// Loads parameters saved by [`Sequential::save`] for a network of this shape.
    pub fn load(&self, path: &Path) -> Result<Vec<f32>, SavedError> {
        let at = |source: SavedError| SavedError::File {
            path: path.display().to_string(),
            source: Box::new(source),
        };
        let text = std::fs::read_to_string(path).map_err(|e| at(SavedError::Io(e)))?;
        let v = serde_json::from_str(&text).map_err(|e| at(SavedError::NotParameters(e)))?;
        self.from_saved(v).map_err(at)
    }
}

/// Why saved parameters cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SavedError {
    /// The file cannot be read.
    #[error("cannot be read: {0}")]
    Io(#[source] std::io::Error),
    /// Not a sagd-nn parameter set at all.
    #[error("not a sagd-nn parameter set: {0}")]
    NotParameters(#[source] serde_json::Error),
    /// Another format version.
    #[error("format {0}, this version reads sagd-nn/1: save the parameters again")]
    Format(String),
    /// Saved for another network.
    #[error("saved for another network shape: load it into the network it was saved from")]
    Shape,
    /// One of the above, in this file.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        #[source]
        source: Box<SavedError>,
    },
}
