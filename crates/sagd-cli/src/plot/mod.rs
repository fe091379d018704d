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

/// plotters' bitmap backend at twice the figure's size (sharp on high-density screens, where a
/// 1× bitmap is magnified), with our own text placement. The figure draws in its own pixels;
/// every coordinate, width and font size is doubled on the way to the bitmap. plotters 0.3.7
/// positions each glyph with `(size / 2 + bounds.min.y) as i32`, which truncates towards zero, so
/// glyphs that sit above the midline and those that reach below it are rounded in opposite
/// directions: a decimal point landed above the digits' baseline, like a mid-dot. Here every glyph
/// is placed on one integer baseline, with its advance and kerning.
pub struct Png<'a>(BitMapBackend<'a>);

/// How many bitmap pixels a figure's pixel is, each way.
pub const PNG_SCALE: i32 = 2;

impl<'a> Png<'a> {
    /// A PNG file for a figure of `size` pixels (the file has [`PNG_SCALE`] times as many).
    pub fn new(path: &'a Path, size: (u32, u32)) -> Self {
        let k = PNG_SCALE as u32;
        Png(BitMapBackend::new(path, (size.0 * k, size.1 * k)))
    }
}

type PngError = plotters_backend::DrawingErrorKind<
    <BitMapBackend<'static> as plotters_backend::DrawingBackend>::ErrorType,
>;

/// A figure's point in the bitmap's pixels.
fn scaled(p: plotters_backend::BackendCoord) -> plotters_backend::BackendCoord {
    (p.0 * PNG_SCALE, p.1 * PNG_SCALE)
}

/// A style with its stroke [`PNG_SCALE`] times as wide.
struct Wide<'s, S>(&'s S);

impl<S: plotters_backend::BackendStyle> plotters_backend::BackendStyle for Wide<'_, S> {
    fn color(&self) -> plotters_backend::BackendColor {
        self.0.color()
    }
    fn stroke_width(&self) -> u32 {
        self.0.stroke_width() * PNG_SCALE as u32
    }
}

impl plotters_backend::DrawingBackend for Png<'_> {
    type ErrorType = <BitMapBackend<'static> as plotters_backend::DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        let (w, h) = self.0.get_size();
        (w / PNG_SCALE as u32, h / PNG_SCALE as u32)
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
        let (x, y) = scaled(point);
        for dy in 0..PNG_SCALE {
            for dx in 0..PNG_SCALE {
                self.0.draw_pixel((x + dx, y + dy), color)?;
            }
        }
        Ok(())
    }
    fn draw_line<S: plotters_backend::BackendStyle>(
        &mut self,
        from: plotters_backend::BackendCoord,
        to: plotters_backend::BackendCoord,
        style: &S,
    ) -> Result<(), PngError> {
        self.0.draw_line(scaled(from), scaled(to), &Wide(style))
    }
    fn draw_rect<S: plotters_backend::BackendStyle>(
        &mut self,
        upper_left: plotters_backend::BackendCoord,
        bottom_right: plotters_backend::BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), PngError> {
        // A filled rectangle covers its last row and column of figure pixels whole.
        let (x, y) = scaled(bottom_right);
        let end = if fill {
            (x + PNG_SCALE - 1, y + PNG_SCALE - 1)
        } else {
            (x, y)
        };
        self.0
            .draw_rect(scaled(upper_left), end, &Wide(style), fill)
    }
    fn fill_polygon<
        S: plotters_backend::BackendStyle,
        I: IntoIterator<Item = plotters_backend::BackendCoord>,
    >(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), PngError> {
        self.0.fill_polygon(vert.into_iter().map(scaled), style)
    }
    fn draw_circle<S: plotters_backend::BackendStyle>(
        &mut self,
        center: plotters_backend::BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), PngError> {
        self.0.draw_circle(
            scaled(center),
            radius * PNG_SCALE as u32,
            &Wide(style),
            fill,
        )
    }
    fn blit_bitmap(
        &mut self,
        pos: plotters_backend::BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), PngError> {
        // Each pixel of the RGB image as a square of bitmap pixels.
        let k = PNG_SCALE as usize;
        let (w, h) = (size.0 as usize, size.1 as usize);
        let mut big = vec![0u8; w * k * h * k * 3];
        for y in 0..h * k {
            for x in 0..w * k {
                let from = ((y / k) * w + x / k) * 3;
                let to = (y * w * k + x) * 3;
                if let (Some(s), Some(d)) = (src.get(from..from + 3), big.get_mut(to..to + 3)) {
                    d.copy_from_slice(s);
                }
            }
        }
        self.0
            .blit_bitmap(scaled(pos), (size.0 * k as u32, size.1 * k as u32), &big)
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
        let k = PNG_SCALE;
        let size = style.size() as f32 * k as f32;
        let glyphs = font.as_scaled(size);
        // The same box and anchor as plotters, so that layouts do not move.
        let ((min_x, min_y), (max_x, max_y)) = style
            .layout_box(text)
            .map_err(|e| plotters_backend::DrawingErrorKind::FontError(Box::new(e)))?;
        let (min_x, min_y, max_x, max_y) = (min_x * k, min_y * k, max_x * k, max_y * k);
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
        let (w, h) = self.0.get_size();
        let pos = scaled(pos);
        let baseline = (size / 2.0).round() as i32;
        let mut x = 0.0f32;
        let mut prev = None;
        let mut pixels = Vec::new();
        for c in text.chars() {
            let id = glyphs.glyph_id(c);
            if let Some(p) = prev {
                x += glyphs.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(size, ab_glyph::point(x, 0.0));
            if let Some(outline) = font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                let (gx, gy) = (b.min.x as i32, baseline + b.min.y as i32);
                outline.draw(|px, py, cov| pixels.push((gx + px as i32, gy + py as i32, cov)));
            }
            x += glyphs.h_advance(id);
        }
        for (px, py, cov) in pixels {
            let (tx, ty) = trans.transform(px + dx - min_x, py + dy - min_y);
            let (tx, ty) = (pos.0 + tx, pos.1 + ty);
            if tx >= 0 && tx < w as i32 && ty >= 0 && ty < h as i32 {
                let c = plotters_backend::BackendColor {
                    alpha: color.alpha * cov.clamp(0.0, 1.0) as f64,
                    rgb: color.rgb,
                };
                self.0.draw_pixel((tx, ty), c)?;
            }
        }
        Ok(())
    }
}
