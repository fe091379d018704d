//! The debiased VAE's figures: Figure 2's density panels and the fine-tuning learning curves.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use sagd_apps::debias::figure::DensitySeries;

use super::{draw_legend, err, segments, Figure};

/// Learning curves: a metric against fine-tuning epochs, one line per method, and a reference level
/// (the pre-trained model's) as a dashed line.
pub struct TraceFigure<'a> {
    /// Title.
    pub title: String,
    /// The metric's name (y axis).
    pub metric: &'a str,
    /// (method, [(epoch, value)]).
    pub curves: Vec<(String, Vec<(f64, f64)>)>,
    /// (label, value) of the horizontal reference line.
    pub reference: Option<(String, f64)>,
}

impl Figure for TraceFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let points = self.curves.iter().flat_map(|(_, c)| c.iter());
        let x_hi = points.clone().map(|p| p.0).fold(1.0, f64::max);
        let ys = points
            .map(|p| p.1)
            .chain(self.reference.iter().map(|r| r.1))
            .filter(|v| v.is_finite());
        let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (0.0, 1.0) };
        let pad = (hi - lo).max(1e-6) * 0.08;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_hi, (lo - pad)..(hi + pad))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("fine-tuning epoch")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc(self.metric)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 18))
            .draw()
            .map_err(err)?;
        if let Some((label, v)) = &self.reference {
            let style = BLACK.stroke_width(1);
            chart
                .draw_series(DashedLineSeries::new([(0.0, *v), (x_hi, *v)], 6, 4, style))
                .map_err(err)?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        }
        for (i, (label, c)) in self.curves.iter().enumerate() {
            const COLOURS: [RGBColor; 4] = [MAGENTA, RGBColor(0, 140, 0), RED, BLUE];
            let style = COLOURS[i % COLOURS.len()].stroke_width(2);
            chart
                .draw_series(segments(c, style))
                .map_err(err)?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    }
}

/// One panel of Figure 2: a histogram of the fitted model's draws of Z.
pub struct DensityPanel {
    /// The panel title (the method).
    pub title: String,
    /// KS distance to π (NaN: not shown).
    pub d: f64,
    /// W1 distance to π (NaN: not shown).
    pub w: f64,
}

/// Figure 2 for one distribution: the data density (dashed), the true π (solid, when known) and the
/// histogram of each fitted model's Z, one panel per model (the library computes the series).
pub struct DensityGrid<'a> {
    /// The curves and histograms, one histogram per panel.
    pub series: &'a DensitySeries,
    /// The panels.
    pub panels: Vec<DensityPanel>,
    /// The caption above the panels.
    pub caption: String,
}

impl DensityGrid<'_> {
    /// Panels per row: three, so that a grid at a report's width keeps its text legible.
    pub const COLUMNS: usize = 3;

    /// The figure's size in pixels: panels of 330 × 300 in rows of [`Self::COLUMNS`].
    pub fn size(&self) -> (u32, u32) {
        let cols = self.panels.len().clamp(1, Self::COLUMNS);
        let rows = self.panels.len().div_ceil(Self::COLUMNS).max(1);
        (330 * cols as u32 + 20, 300 * rows as u32 + 40)
    }
}

impl Figure for DensityGrid<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root
            .titled(&self.caption, ("sans-serif", 17))
            .map_err(err)?;
        let DensitySeries {
            lo,
            hi,
            grid,
            data_density,
            true_density,
            bin_width: width,
            histograms: hists,
        } = self.series;
        let (lo, hi, width) = (*lo, *hi, *width);
        let ymax = self.series.max_density() * 1.1;
        let cols = self.panels.len().clamp(1, Self::COLUMNS);
        let rows = self.panels.len().div_ceil(Self::COLUMNS).max(1);
        let areas = root.split_evenly((rows, cols));
        for ((area, p), h) in areas.iter().zip(&self.panels).zip(hists) {
            let mut chart = ChartBuilder::on(area)
                .caption(&p.title, ("sans-serif", 17))
                .margin(8)
                .x_label_area_size(42)
                .y_label_area_size(52)
                .build_cartesian_2d(lo..hi, 0.0..ymax.max(1e-6))
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .label_style(("sans-serif", 14))
                .x_desc("z")
                .y_desc("density")
                .axis_desc_style(("sans-serif", 14))
                .x_labels(6)
                .y_labels(5)
                .draw()
                .map_err(err)?;
            let fill = BLUE.mix(0.45).filled();
            chart
                .draw_series(h.iter().enumerate().map(|(b, v)| {
                    let x0 = lo + b as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width, *v)], fill)
                }))
                .map_err(err)?
                .label("estimated π")
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], fill));
            let dashed = BLACK.stroke_width(2);
            chart
                .draw_series(DashedLineSeries::new(
                    grid.iter().cloned().zip(data_density.iter().cloned()),
                    6,
                    4,
                    dashed,
                ))
                .map_err(err)?
                .label("data")
                .legend(move |(x, y)| {
                    plotters::element::DashedPathElement::new([(x, y), (x + 20, y)], 5, 3, dashed)
                });
            if let Some(td) = &true_density {
                let solid = RED.stroke_width(2);
                let curve: Vec<(f64, f64)> = grid.iter().cloned().zip(td.iter().cloned()).collect();
                chart
                    .draw_series(segments(&curve, solid))
                    .map_err(err)?
                    .label("true π")
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], solid));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(err)?;
            if p.d.is_finite() {
                let style = ("sans-serif", 14).into_font().color(&BLACK);
                // Inside the plot, clear of the y axis and its labels.
                area.draw_text(&format!("D = {:.4}", p.d), &style, (70, 36))
                    .map_err(err)?;
                area.draw_text(&format!("W = {:.4}", p.w), &style, (70, 54))
                    .map_err(err)?;
            }
        }
        Ok(())
    }
}
