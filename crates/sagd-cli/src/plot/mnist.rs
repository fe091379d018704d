//! Figure 3 (100 generated digits per model) and E3's learning curves.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use sagd_apps::mnist::experiment::Curve;

use super::{err, segments, Figure};

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

/// Each phase's loss at every update (a moving average over up to 20 updates), one panel per
/// phase, each on the axis of what that phase minimises.
pub struct CurvesFigure<'a> {
    /// The phases' curves.
    pub curves: &'a [Curve],
}

impl CurvesFigure<'_> {
    /// The figure's size in pixels: a panel of 400 × 420 per phase, side by side.
    pub fn size(&self) -> (u32, u32) {
        (400 * self.curves.len().max(1) as u32 + 20, 420)
    }
}

/// What a phase of E3 minimises, as its panel's title and y axis say it.
fn objective(phase: &str) -> (String, &'static str) {
    match phase {
        "pretrain" => ("VAE pre-training".into(), "negative ELBO (nats per image)"),
        "sagd" => (
            "SAGD refinement (generator)".into(),
            "−log p(x | u) at the chains' states",
        ),
        "control" => (
            "control: more ELBO updates".into(),
            "negative ELBO (nats per image)",
        ),
        other => (other.to_string(), "loss per image"),
    }
}

impl Figure for CurvesFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root
            .titled(
                "E3 learning curves: each phase's loss per update (moving average of up to 20)",
                ("sans-serif", 17),
            )
            .map_err(err)?;
        let areas = root.split_evenly((1, self.curves.len().max(1)));
        for (i, (area, c)) in areas.iter().zip(self.curves).enumerate() {
            let w = 20.min(c.loss.len() / 5).max(1);
            let pts: Vec<(u32, f64)> = c
                .loss
                .windows(w)
                .enumerate()
                .map(|(k, s)| ((k + w) as u32, s.iter().sum::<f64>() / w as f64))
                .filter(|p| p.1.is_finite())
                .collect();
            let (y0, y1) = pts
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                    (a.min(p.1), b.max(p.1))
                });
            let (y0, y1) = if y0 < y1 {
                let pad = (y1 - y0) * 0.05;
                (y0 - pad, y1 + pad)
            } else if y0.is_finite() {
                (y0 - 1.0, y0 + 1.0)
            } else {
                (0.0, 1.0)
            };
            let n = c.loss.len().max(1) as u32;
            // Enough decimals that neighbouring ticks differ.
            let decimals = if y1 - y0 >= 20.0 {
                0
            } else if y1 - y0 >= 2.0 {
                1
            } else {
                2
            };
            let (title, y_desc) = objective(&c.phase);
            let mut chart = ChartBuilder::on(area)
                .caption(format!("{title}, {n} updates"), ("sans-serif", 16))
                .margin(10)
                .margin_right(24)
                .x_label_area_size(44)
                .y_label_area_size(64)
                .build_cartesian_2d(0..n, y0..y1)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("update")
                .y_desc(y_desc)
                .x_labels(6)
                .x_label_formatter(&|x| format!("{x}"))
                .y_label_formatter(&|y| format!("{y:.decimals$}"))
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 14))
                .draw()
                .map_err(err)?;
            const COLOURS: [RGBColor; 3] = [BLUE, RED, RGBColor(0, 130, 0)];
            let color = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(segments(&pts, color.stroke_width(2)))
                .map_err(err)?;
        }
        Ok(())
    }
}
