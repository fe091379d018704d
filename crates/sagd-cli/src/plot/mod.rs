//! Figures, drawn with plotters into PNG and SVG with an embedded font (no system font needed).
//! The numbers come from the library; these files only draw them.

mod debias;
mod em;

pub use debias::{DensityGrid, DensityPanel, TraceFigure};
pub use em::{LoglikFigure, PathsFigure};

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

static FONT: Once = Once::new();

/// Registers the embedded DejaVu Sans as "sans-serif".
pub fn init_fonts() {
    FONT.call_once(|| {
        // The bytes are a valid TrueType font shipped with the crate; failure would be a build defect.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            include_bytes!("../../assets/DejaVuSans.ttf"),
        );
    });
}

/// A figure that can be drawn on any backend.
pub trait Figure {
    /// Draws the figure on `root` (already filled white).
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>;
}

/// Writes `fig` as a PNG and an SVG of `size` pixels.
pub fn save(fig: &impl Figure, png: &Path, svg: &Path, size: (u32, u32)) -> Result<()> {
    init_fonts();
    {
        let root = BitMapBackend::new(png, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| anyhow!("drawing {}: {e}", png.display()))?;
        fig.draw(&root)?;
        root.present()
            .map_err(|e| anyhow!("writing {}: {e}", png.display()))?;
    }
    let root = SVGBackend::new(svg, size).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("drawing {}: {e}", svg.display()))?;
    fig.draw(&root)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", svg.display()))?;
    Ok(())
}

/// The series' legend, in one style for every figure.
pub(crate) fn draw_legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(at)
        .draw()
        .map_err(err)
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing a figure: {e}")
}
