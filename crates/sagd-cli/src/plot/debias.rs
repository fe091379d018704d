//! The debiased VAE's figures: Figure 2's density panels and the fine-tuning learning curves.

use anyhow::Result;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use sagd_apps::debias::figure::{DensitySeries, PredictiveSeries};

use super::{draw_legend, err, legend_sized, segments, Figure};

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

/// A panel's axes: x against density.
type Axes = Cartesian2d<RangedCoordf64, RangedCoordf64>;

/// Panels per row: three, so that a grid at a report's width keeps its text legible.
const COLUMNS: usize = 3;

/// The size in pixels of a grid of `panels` panels of 330 × 300 in rows of [`COLUMNS`].
pub fn grid_size(panels: usize) -> (u32, u32) {
    let cols = panels.clamp(1, COLUMNS);
    let rows = panels.div_ceil(COLUMNS).max(1);
    (330 * cols as u32 + 20, 300 * rows as u32 + 40)
}

/// The areas of a grid of `panels` panels under `caption`.
fn grid_areas<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    caption: &str,
    panels: usize,
) -> Result<Vec<DrawingArea<DB, Shift>>> {
    let root = root.titled(caption, ("sans-serif", 17)).map_err(err)?;
    let cols = panels.clamp(1, COLUMNS);
    Ok(root.split_evenly((panels.div_ceil(COLUMNS).max(1), cols)))
}

/// One panel's axes: `lo..hi` against a density up to `ymax`.
fn panel_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    (lo, hi, ymax): (f64, f64, f64),
    x_desc: &str,
) -> Result<ChartContext<'a, DB, Axes>> {
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 17))
        .margin(8)
        .x_label_area_size(42)
        .y_label_area_size(52)
        .build_cartesian_2d(lo..hi, 0.0..ymax.max(1e-6))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .label_style(("sans-serif", 14))
        .x_desc(x_desc)
        .y_desc("density")
        .axis_desc_style(("sans-serif", 14))
        .x_labels(6)
        .y_labels(5)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// A histogram of bins of `width` from `lo` into `chart`, labelled `label`.
fn draw_histogram<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Axes>,
    (lo, width): (f64, f64),
    h: &[f64],
    fill: ShapeStyle,
    label: &str,
) -> Result<()> {
    chart
        .draw_series(h.iter().enumerate().map(|(b, v)| {
            let x0 = lo + b as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width, *v)], fill)
        }))
        .map_err(err)?
        .label(label)
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], fill));
    Ok(())
}

impl DensityGrid<'_> {
    /// The figure's size in pixels.
    pub fn size(&self) -> (u32, u32) {
        grid_size(self.panels.len())
    }
}

impl Figure for DensityGrid<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
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
        let areas = grid_areas(root, &self.caption, self.panels.len())?;
        for (i, ((area, p), h)) in areas.iter().zip(&self.panels).zip(hists).enumerate() {
            let mut chart = panel_chart(area, &p.title, (lo, hi, ymax), "z")?;
            let fill = BLUE.mix(0.45).filled();
            draw_histogram(&mut chart, (lo, width), h, fill, "estimated π")?;
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
            // Every panel draws the same series: one legend, in the first, serves the figure.
            if i == 0 {
                legend_sized(&mut chart, SeriesLabelPosition::UpperRight, 13)?;
            }
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

/// A deconvolution's predictive check: per fitted model, the histogram of the observations and
/// the density of X that the model implies (its draws of Z convolved with the noise), with the
/// model's held-out score when there is one.
pub struct PredictiveGrid<'a> {
    /// The histogram and the curves, one curve per panel.
    pub series: &'a PredictiveSeries,
    /// Per panel: its title and a line under it (the held-out score; empty for none).
    pub panels: Vec<(String, String)>,
    /// The caption above the panels.
    pub caption: String,
}

impl PredictiveGrid<'_> {
    /// The figure's size in pixels.
    pub fn size(&self) -> (u32, u32) {
        grid_size(self.panels.len())
    }
}

impl Figure for PredictiveGrid<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let s = self.series;
        // Headroom for the score above the curves.
        let ymax = s.max_density() * 1.2;
        let areas = grid_areas(root, &self.caption, self.panels.len())?;
        for ((area, (title, note)), curve) in areas.iter().zip(&self.panels).zip(&s.predictive) {
            let mut chart = panel_chart(area, title, (s.lo, s.hi, ymax), "x")?;
            // No legend: the caption names the two series, and the corner holds the score.
            let fill = BLACK.mix(0.25).filled();
            let hist = &s.data_histogram;
            draw_histogram(&mut chart, (s.lo, s.bin_width), hist, fill, "data")?;
            let points: Vec<(f64, f64)> =
                s.grid.iter().cloned().zip(curve.iter().cloned()).collect();
            chart
                .draw_series(segments(&points, BLUE.stroke_width(2)))
                .map_err(err)?;
            if !note.is_empty() {
                let style = ("sans-serif", 13).into_font().color(&BLACK);
                area.draw_text(note, &style, (62, 36)).map_err(err)?;
            }
        }
        Ok(())
    }
}
