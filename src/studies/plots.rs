//! Line charts as PNG and SVG (plotters), for `fedsim report`: each series a mean line with a
//! ±std band; and the label heat map of `fedsim describe`. Text is drawn with the bundled
//! DejaVu Sans, so no system font is needed. Images are drawn in memory and written through
//! `io`'s staging folders, like every other file fedsim writes.

use crate::io::Staging;
use crate::results::ReportError;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::PathBuf;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("fonts/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// One line: `(x, mean, std)` points, sorted by x.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64, f64)>,
}

/// A chart to draw.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    /// Ticks on a log x axis at these values (a sweep's values), where given; a linear axis
    /// has evenly spaced ticks.
    pub x_ticks: Option<Vec<f64>>,
    /// Start the y axis at zero (else it spans the values).
    pub y_from_zero: bool,
    pub series: Vec<Series>,
}

/// Matplotlib's tab10 colours.
const TAB10: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// A tick label with at most 3 significant digits and no trailing zeros.
fn short(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    (lo <= hi).then_some((lo, hi))
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let pts = || chart.series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = bounds(pts().map(|p| p.0)).ok_or("nothing to plot")?;
    let (y0, y1) = bounds(pts().flat_map(|p| [p.1 - p.2, p.1 + p.2])).ok_or("nothing to plot")?;
    let y0 = if chart.y_from_zero { y0.min(0.0) } else { y0 };
    // Headroom at the top for the legend.
    let pad_y = ((y1 - y0) * 0.05).max(1e-3);
    let (y0, y1) = (
        y0 - pad_y,
        y1 + pad_y + (y1 - y0) * 0.08 * chart.series.len() as f64,
    );
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&chart.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60);
    let series_style = |i: usize| {
        let (r, g, b) = TAB10[i % TAB10.len()];
        RGBColor(r, g, b).to_rgba()
    };
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_labels(10)
                .bold_line_style(RGBColor(215, 215, 215))
                .light_line_style(WHITE.mix(0.0))
                .x_label_formatter(&|x| short(*x))
                .x_desc(chart.x_label.as_str())
                .y_desc(chart.y_label.as_str())
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(e)?;
            for (i, s) in chart.series.iter().enumerate() {
                let color = series_style(i);
                let mut band: Vec<(f64, f64)> = s.points.iter().map(|p| (p.0, p.1 + p.2)).collect();
                band.extend(s.points.iter().rev().map(|p| (p.0, p.1 - p.2)));
                if s.points.iter().any(|p| p.2 > 0.0) {
                    ctx.draw_series(std::iter::once(Polygon::new(
                        band,
                        color.mix(0.15).filled(),
                    )))
                    .map_err(e)?;
                }
                ctx.draw_series(LineSeries::new(
                    s.points.iter().map(|p| (p.0, p.1)),
                    color.stroke_width(2),
                ))
                .map_err(e)?
                .label(s.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
                ctx.draw_series(
                    s.points
                        .iter()
                        .map(|p| Circle::new((p.0, p.1), 3, color.filled())),
                )
                .map_err(e)?;
            }
            ctx.configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(e)?;
        }};
    }
    let ticks = chart.x_ticks.clone().filter(|t| !t.is_empty());
    if chart.log_x && x0 > 0.0 {
        let x = (x0 * 0.9..x1 * 1.1).log_scale();
        match ticks {
            Some(t) => body!(builder
                .build_cartesian_2d(x.with_key_points(t), y0..y1)
                .map_err(e)?),
            None => body!(builder.build_cartesian_2d(x, y0..y1).map_err(e)?),
        }
    } else {
        let pad_x = ((x1 - x0) * 0.02).max(1e-9);
        body!(builder
            .build_cartesian_2d(x0 - pad_x..x1 + pad_x, y0..y1)
            .map_err(e)?);
    }
    root.present().map_err(e)?;
    Ok(())
}

/// `chart` drawn as PNG and as SVG, in memory: `[("png", bytes), ("svg", bytes)]`.
pub fn chart_images(chart: &Chart) -> Result<[(&'static str, Vec<u8>); 2], String> {
    register_font();
    let png = png_of((960, 640), |area| draw(area, chart))?;
    let mut svg = String::new();
    draw(
        SVGBackend::with_string(&mut svg, (960, 640)).into_drawing_area(),
        chart,
    )?;
    Ok([("png", png), ("svg", svg.into_bytes())])
}

/// Draws `chart` into the staging folder as `<stem>.png` and `<stem>.svg`; returns their
/// paths.
pub fn write_chart(
    staging: &Staging,
    stem: &str,
    chart: &Chart,
) -> Result<Vec<PathBuf>, ReportError> {
    let fail = |message: String| ReportError::Plot {
        path: staging.path(stem),
        message,
    };
    let mut out = Vec::new();
    for (ext, bytes) in chart_images(chart).map_err(fail)? {
        out.push(staging.write(&format!("{stem}.{ext}"), &bytes)?);
    }
    Ok(out)
}

/// A PNG image of `size` (width, height) drawn by `draw` on a bitmap in memory, encoded as
/// plotters encodes the PNG files it saves itself.
fn png_of(
    size: (u32, u32),
    draw: impl FnOnce(DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<Vec<u8>, String> {
    let mut pixels = vec![0u8; size.0 as usize * size.1 as usize * 3];
    draw(BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area())?;
    let image = image::RgbImage::from_raw(size.0, size.1, pixels)
        .ok_or("the bitmap has another size than its image")?;
    let mut png = std::io::Cursor::new(Vec::new());
    image
        .write_to(&mut png, image::ImageOutputFormat::Png)
        .map_err(|e| e.to_string())?;
    Ok(png.into_inner())
}

/// The heat map's colour of a share in [0, 1]: white to dark blue (matplotlib's `Blues`
/// ends).
fn share_colour(share: f64) -> RGBColor {
    let t = share.clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(mix(255.0, 8.0), mix(255.0, 48.0), mix(255.0, 107.0))
}

/// A `clients × labels` heat map (PNG bytes) of each client's label shares (`shares[c][y]`,
/// rows summing to 1): darker is a larger share, with its colour scale on the right and each
/// label's tick at the middle of its column.
pub fn label_heatmap_png(title: &str, shares: &[Vec<f64>]) -> Result<Vec<u8>, String> {
    register_font();
    png_of((1040, 720), |root| {
        fn e<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
            e.to_string()
        }
        root.fill(&WHITE).map_err(e)?;
        let (clients, labels) = (shares.len(), shares.first().map_or(0, Vec::len));
        if clients == 0 || labels == 0 {
            return Err("nothing to plot".into());
        }
        let root = root.titled(title, ("sans-serif", 22)).map_err(e)?;
        let (main, scale) = root.split_horizontally(920);
        let mut chart = ChartBuilder::on(&main)
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(60)
            // Segments 0..=last: one column a label, its tick in the middle.
            .build_cartesian_2d((0..labels - 1).into_segmented(), 0..clients)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(labels.min(62))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(y) => y.to_string(),
                _ => String::new(),
            })
            .x_desc("label")
            .y_desc("client")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(e)?;
        let cells = shares.iter().enumerate().flat_map(|(c, row)| {
            row.iter().enumerate().map(move |(y, &share)| {
                Rectangle::new(
                    [
                        (SegmentValue::Exact(y), c),
                        (SegmentValue::Exact(y + 1), c + 1),
                    ],
                    share_colour(share).filled(),
                )
            })
        });
        chart.draw_series(cells).map_err(e)?;
        // The colour scale: share 0 at the bottom to 1 at the top.
        let mut bar = ChartBuilder::on(&scale)
            .margin_top(16)
            .margin_bottom(56)
            .margin_right(24)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..1.0, 0.0..1.0)
            .map_err(e)?;
        bar.configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_labels(6)
            .y_desc("share")
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(e)?;
        let steps = 100;
        bar.draw_series((0..steps).map(|i| {
            let (lo, hi) = (i as f64 / steps as f64, (i + 1) as f64 / steps as f64);
            // The right part of the area: its left keeps clear of the tick labels.
            Rectangle::new([(0.35, lo), (1.0, hi)], share_colour(lo).filled())
        }))
        .map_err(e)?;
        root.present().map_err(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_tick_labels() {
        assert_eq!(short(0.30000000000000004), "0.3");
        assert_eq!(short(0.05), "0.05");
        assert_eq!(short(1500.0), "1500");
        assert_eq!(short(72.26), "72.3");
    }

    #[test]
    fn writes_png_and_svg_with_text() {
        let chart = Chart {
            title: "accuracy vs sampling rate".into(),
            x_label: "sampling.fraction".into(),
            y_label: "test accuracy (%)".into(),
            log_x: true,
            x_ticks: None,
            y_from_zero: false,
            series: vec![Series {
                label: "fedem".into(),
                points: vec![(0.05, 70.0, 1.0), (0.5, 80.0, 0.5), (1.0, 82.0, 0.0)],
            }],
        };
        let [(png_ext, png), (svg_ext, svg)] = chart_images(&chart).unwrap();
        assert_eq!((png_ext, svg_ext), ("png", "svg"));
        assert_eq!(&png[1..4], b"PNG");
        let svg = String::from_utf8(svg).unwrap();
        assert!(
            svg.contains("accuracy vs sampling rate") && svg.contains("fedem"),
            "{svg}"
        );
    }
}
