//! Figures, drawn with plotters into PNG and SVG with an embedded font (no system font needed).
//! The numbers come from the library; these files only draw them.

mod debias;
mod em;
mod mnist;

pub use debias::{DensityGrid, DensityPanel, PredictiveGrid, TraceFigure};
pub use em::{LoglikFigure, PathsFigure};
pub use mnist::{CurvesFigure, DigitsFigure};

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
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT_BYTES);
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
        let root = Png::new(png, size).into_drawing_area();
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
    legend_sized(chart, at, 15)
}

/// [`draw_legend`] with labels of `size` points (small panels).
pub(crate) fn legend_sized<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
    size: u32,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", size))
        .position(at)
        .draw()
        .map_err(err)
}

/// A thick polyline as separate segments. plotters joins the segments of a thick line with
/// miters, and a noisy path that turns back on itself grows spikes far outside the plot.
pub(crate) fn segments<C: Copy>(points: &[C], style: ShapeStyle) -> Vec<PathElement<C>> {
    points
        .windows(2)
        .map(|w| PathElement::new([w[0], w[1]], style))
        .collect()
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing a figure: {e}")
}

/// The embedded font's bytes.
const FONT_BYTES: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// plotters' bitmap backend with our own text placement. plotters 0.3.7 positions each glyph with
/// `(size / 2 + bounds.min.y) as i32`, which truncates towards zero, so glyphs that sit above the
/// midline and those that reach below it are rounded in opposite directions: a decimal point
/// landed above the digits' baseline, like a mid-dot. Here every glyph is placed on one integer
/// baseline, with its advance and kerning; everything else is the bitmap backend's.
pub struct Png<'a>(BitMapBackend<'a>);

impl<'a> Png<'a> {
    /// A PNG file of `size` pixels.
    pub fn new(path: &'a Path, size: (u32, u32)) -> Self {
        Png(BitMapBackend::new(path, size))
    }
}

type PngError = plotters_backend::DrawingErrorKind<
    <BitMapBackend<'static> as plotters_backend::DrawingBackend>::ErrorType,
>;

impl plotters_backend::DrawingBackend for Png<'_> {
    type ErrorType = <BitMapBackend<'static> as plotters_backend::DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), PngError> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), PngError> {
        self.0.present()
    }
    fn draw_pixel(
        &mut self,
        point: plotters_backend::BackendCoord,
        color: plotters_backend::BackendColor,
    ) -> Result<(), PngError> {
        self.0.draw_pixel(point, color)
    }
    fn draw_line<S: plotters_backend::BackendStyle>(
        &mut self,
        from: plotters_backend::BackendCoord,
        to: plotters_backend::BackendCoord,
        style: &S,
    ) -> Result<(), PngError> {
        self.0.draw_line(from, to, style)
    }
    fn draw_rect<S: plotters_backend::BackendStyle>(
        &mut self,
        upper_left: plotters_backend::BackendCoord,
        bottom_right: plotters_backend::BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), PngError> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn fill_polygon<
        S: plotters_backend::BackendStyle,
        I: IntoIterator<Item = plotters_backend::BackendCoord>,
    >(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), PngError> {
        self.0.fill_polygon(vert, style)
    }
    fn draw_circle<S: plotters_backend::BackendStyle>(
        &mut self,
        center: plotters_backend::BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), PngError> {
        self.0.draw_circle(center, radius, style, fill)
    }
    fn blit_bitmap(
        &mut self,
        pos: plotters_backend::BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), PngError> {
        self.0.blit_bitmap(pos, size, src)
    }
    fn draw_text<T: plotters_backend::BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: plotters_backend::BackendCoord,
    ) -> Result<(), PngError> {
        use ab_glyph::{Font, FontRef, ScaleFont};
        use plotters_backend::text_anchor::{HPos, VPos};
        let color = style.color();
        let Ok(font) = FontRef::try_from_slice(FONT_BYTES) else {
            return Ok(());
        };
        if color.alpha == 0.0 {
            return Ok(());
        }
        let size = style.size() as f32;
        let scaled = font.as_scaled(size);
        // The same box and anchor as plotters, so that layouts do not move.
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| plotters_backend::DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        let baseline = (size / 2.0).round() as i32;
        let mut x = 0.0f32;
        let mut prev = None;
        let mut pixels = Vec::new();
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                x += scaled.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(size, ab_glyph::point(x, 0.0));
            if let Some(outline) = font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                let (gx, gy) = (b.min.x as i32, baseline + b.min.y as i32);
                outline.draw(|px, py, cov| pixels.push((gx + px as i32, gy + py as i32, cov)));
            }
            x += scaled.h_advance(id);
        }
        for (px, py, cov) in pixels {
            let (tx, ty) = trans.transform(px + dx - min_x, py + dy - min_y);
            let (tx, ty) = (pos.0 + tx, pos.1 + ty);
            if tx >= 0 && tx < w as i32 && ty >= 0 && ty < h as i32 {
                let c = plotters_backend::BackendColor {
                    alpha: color.alpha * cov.clamp(0.0, 1.0) as f64,
                    rgb: color.rgb,
                };
                self.draw_pixel((tx, ty), c)?;
            }
        }
        Ok(())
    }
}
