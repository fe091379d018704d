//! Figure 3 (100 generated digits per model) and E3's learning curves.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use sagd_apps::mnist::experiment::Curve;

use super::{draw_legend, err, Figure};

/// Panels of 100 digits (pixel probabilities, 100 × 784 each) in 10 × 10 grids, one under the
/// other, each with its title.
pub struct DigitsFigure<'a> {
    /// (title, probabilities).
    pub panels: &'a [(&'a str, &'a [f32])],
}

impl Figure for DigitsFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let areas = root.split_evenly((self.panels.len().max(1), 1));
        for (area, (title, probs)) in areas.iter().zip(self.panels) {
            let area = area.titled(title, ("sans-serif", 22)).map_err(err)?;
            let (w, h) = area.dim_in_pixel();
            // 280 × 280 image pixels, with a gap of 2 image pixels between digits.
            let side = 28 * 10 + 2 * 9;
            let scale = ((w.min(h) as i32 - 10) / side).max(1);
            let x0 = (w as i32 - side * scale) / 2;
            for (k, digit) in probs.chunks_exact(784).take(100).enumerate() {
                let (gx, gy) = ((k % 10) as i32 * 30, (k / 10) as i32 * 30);
                for (row, line) in digit.chunks_exact(28).enumerate() {
                    // Grey levels in 8 steps, runs of one level drawn as one rectangle (the SVG
                    // stays small); white is not drawn.
                    let level = |p: f32| (p.clamp(0.0, 1.0) * 7.0).round() as u8;
                    let mut col = 0;
                    while col < 28 {
                        let l = level(line[col]);
                        let mut end = col + 1;
                        while end < 28 && level(line[end]) == l {
                            end += 1;
                        }
                        if l > 0 {
                            let g = 255 - (l as u32 * 255 / 7) as u8;
                            let (x, y) = (
                                x0 + (gx + col as i32) * scale,
                                5 + (gy + row as i32) * scale,
                            );
                            area.draw(&Rectangle::new(
                                [(x, y), (x + (end - col) as i32 * scale, y + scale)],
                                RGBColor(g, g, g).filled(),
                            ))
                            .map_err(err)?;
                        }
                        col = end;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The loss of every update of each phase (a moving average over 20 updates, where there are
/// that many).
pub struct CurvesFigure<'a> {
    /// The phases' curves.
    pub curves: &'a [Curve],
}

impl Figure for CurvesFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let smooth = |v: &[f64]| -> Vec<(f64, f64)> {
            let w = 20.min(v.len() / 5).max(1);
            v.windows(w)
                .enumerate()
                .map(|(i, s)| ((i + w) as f64, s.iter().sum::<f64>() / w as f64))
                .filter(|p| p.1.is_finite())
                .collect()
        };
        let series: Vec<(&str, Vec<(f64, f64)>)> = self
            .curves
            .iter()
            .map(|c| (c.phase.as_str(), smooth(&c.loss)))
            .collect();
        let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
        let x1 = xs.fold(1.0f64, f64::max);
        let ys: Vec<f64> = series
            .iter()
            .flat_map(|s| s.1.iter().map(|p| p.1))
            .collect();
        let (y0, y1) = ys
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(*v), b.max(*v))
            });
        let (y0, y1) = if y0 < y1 { (y0, y1) } else { (0.0, 1.0) };
        let mut chart = ChartBuilder::on(root)
            .caption(
                "E3 learning curves (loss per image, moving average of up to 20 updates)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x1, y0..y1)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("update of the phase")
            .y_desc("loss")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}
