//! Figure 1: the EM paths over the log-likelihood surface, and ℓ along them.

use anyhow::Result;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use sagd_apps::e1::Surface;

use super::{draw_legend, err, segments, Figure};

/// Figure 1a: the (a, b) paths of SAGD and exact GD over a heat map of ℓ(a, b).
pub struct PathsFigure<'a> {
    /// ℓ on a grid.
    pub surface: &'a Surface,
    /// SAGD's θ after every update.
    pub sagd: &'a [Vec<f64>],
    /// Exact GD's θ after every update.
    pub exact: &'a [Vec<f64>],
    /// The MLE.
    pub mle: &'a [f64],
    /// The true θ, for simulated data.
    pub truth: Option<&'a [f64]>,
}

impl Figure for PathsFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        draw_paths(root, self)
    }
}

fn draw_paths<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &PathsFigure<'_>,
) -> Result<()> {
    let PathsFigure {
        surface,
        sagd,
        exact,
        mle,
        truth,
    } = *f;
    let (a0, a1) = (surface.a[0], *surface.a.last().unwrap_or(&1.0));
    let (b0, b1) = (surface.b[0], *surface.b.last().unwrap_or(&1.0));
    // Colour by log(1 + ℓ_max − ℓ): resolution near the maximum, where the paths end.
    let max = surface
        .loglik
        .iter()
        .flatten()
        .cloned()
        .fold(f64::NEG_INFINITY, f64::max);
    let depth = |l: f64| (1.0 + (max - l).clamp(0.0, 1e6)).ln();
    let deepest = surface
        .loglik
        .iter()
        .flatten()
        .cloned()
        .map(depth)
        .fold(1e-9, f64::max)
        .min((1.0f64 + 200.0).ln());
    let (main, bar) = root.split_horizontally(root.dim_in_pixel().0 - 110);
    let mut chart = ChartBuilder::on(&main)
        .caption(
            "SAGD and exact GD paths on the log-likelihood surface",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(a0..a1, b0..b1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("a")
        .y_desc("b")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(err)?;
    let (da, db) = (
        (a1 - a0) / (surface.a.len() - 1).max(1) as f64,
        (b1 - b0) / (surface.b.len() - 1).max(1) as f64,
    );
    chart
        .draw_series(surface.a.iter().enumerate().flat_map(|(i, a)| {
            surface.b.iter().enumerate().map(move |(j, b)| {
                let v = depth(surface.loglik[i][j]).min(deepest);
                let c = ViridisRGB::get_color_normalized(deepest - v, 0.0, deepest);
                Rectangle::new(
                    [(a - da / 2.0, b - db / 2.0), (a + da / 2.0, b + db / 2.0)],
                    c.filled(),
                )
            })
        }))
        .map_err(err)?;
    let pts = |p: &[Vec<f64>], style: ShapeStyle| {
        segments(&p.iter().map(|t| (t[0], t[1])).collect::<Vec<_>>(), style)
    };
    chart
        .draw_series(pts(exact, BLACK.stroke_width(3)))
        .map_err(err)?
        .label("exact GD")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(3)));
    chart
        .draw_series(pts(sagd, RED.stroke_width(2)))
        .map_err(err)?
        .label("SAGD")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(2)));
    draw_markers(&mut chart, exact, mle, truth)?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    draw_colour_bar(&bar, deepest)
}

/// The paths' start, the MLE and (simulated data) the true θ.
fn draw_markers<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    exact: &[Vec<f64>],
    mle: &[f64],
    truth: Option<&[f64]>,
) -> Result<()> {
    // White markers with a black rim: visible on the heat map's light and dark colours and on
    // the legend's white.
    let ring = |at, r| {
        EmptyElement::at(at)
            + Circle::new((0, 0), r + 2, BLACK.filled())
            + Circle::new((0, 0), r, WHITE.filled())
    };
    let cross = |at, r| {
        EmptyElement::at(at)
            + Cross::new((0, 0), r + 1, BLACK.stroke_width(6))
            + Cross::new((0, 0), r, WHITE.stroke_width(3))
    };
    if let Some(start) = exact.first() {
        chart
            .draw_series([ring((start[0], start[1]), 6)])
            .map_err(err)?
            .label("start")
            .legend(|(x, y)| {
                EmptyElement::at((x + 10, y))
                    + Circle::new((0, 0), 6, BLACK.filled())
                    + Circle::new((0, 0), 4, WHITE.filled())
            });
    }
    chart
        .draw_series([cross((mle[0], mle[1]), 9)])
        .map_err(err)?
        .label("MLE")
        .legend(|(x, y)| {
            EmptyElement::at((x + 10, y))
                + Cross::new((0, 0), 7, BLACK.stroke_width(6))
                + Cross::new((0, 0), 6, WHITE.stroke_width(3))
        });
    if let Some(t) = truth {
        chart
            .draw_series([TriangleMarker::new((t[0], t[1]), 8, MAGENTA.filled())])
            .map_err(err)?
            .label("true θ")
            .legend(|(x, y)| TriangleMarker::new((x + 10, y), 6, MAGENTA.filled()));
    }
    Ok(())
}

/// The heat map's colour bar, in 1 + ℓ_max − ℓ on a log axis up to e^`deepest`.
fn draw_colour_bar<DB: DrawingBackend>(bar: &DrawingArea<DB, Shift>, deepest: f64) -> Result<()> {
    let top = deepest.exp();
    let mut cb = ChartBuilder::on(bar)
        .margin_top(48)
        .margin_bottom(57)
        .margin_right(10)
        .y_label_area_size(60)
        .caption("1 + ℓmax − ℓ", ("sans-serif", 14))
        .build_cartesian_2d(0.0..1.0, (1.0..top).log_scale())
        .map_err(err)?;
    cb.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(8)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    let steps = 100;
    cb.draw_series((0..steps).map(|k| {
        let lo = (deepest * k as f64 / steps as f64).exp();
        let hi = (deepest * (k + 1) as f64 / steps as f64).exp();
        let c = ViridisRGB::get_color_normalized(deepest - lo.ln(), 0.0, deepest);
        Rectangle::new([(0.0, lo), (1.0, hi)], c.filled())
    }))
    .map_err(err)?;
    Ok(())
}

/// Figure 1b: ℓ versus gradient update for both methods, with the maximum as a horizontal line.
pub struct LoglikFigure<'a> {
    /// SAGD's ℓ(θ) at every update.
    pub sagd: &'a [f64],
    /// Exact GD's.
    pub exact: &'a [f64],
    /// The maximum log-likelihood.
    pub max: f64,
}

impl Figure for LoglikFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        draw_loglik(root, self.sagd, self.exact, self.max)
    }
}

fn draw_loglik<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    sagd: &[f64],
    exact: &[f64],
    max: f64,
) -> Result<()> {
    // The distance below the maximum on a log axis: the paths' ends, a fraction of a nat apart,
    // stay apart beside a start hundreds of nats below (a linear ℓ axis flattened them into one).
    let floor = 1e-3;
    let gap = |l: f64| (max - l).max(floor);
    let gaps = sagd.iter().chain(exact).map(|&l| gap(l));
    let lo = gaps.clone().fold(f64::INFINITY, f64::min) / 2.0;
    let hi = gaps.fold(floor, f64::max) * 2.0;
    let n = sagd.len().max(exact.len()).max(2) - 1;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("Distance below the maximum log-likelihood ({max:.3}) at each update"),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0..n, (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("gradient update")
        .y_desc("ℓ(MLE) − ℓ(θ), nats (log scale)")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 18))
        .draw()
        .map_err(err)?;
    let along =
        |v: &[f64]| -> Vec<(usize, f64)> { v.iter().map(|&l| gap(l)).enumerate().collect() };
    let series = [
        (along(exact), BLACK.stroke_width(3), "exact GD".to_string()),
        (along(sagd), RED.stroke_width(2), "SAGD".to_string()),
    ];
    for (points, style, label) in series {
        chart
            .draw_series(segments(&points, style))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}
