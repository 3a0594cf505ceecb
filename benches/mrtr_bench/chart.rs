//! `m1.svg`: M1's throughput and p99 latency against concurrency, one line per target, drawn
//! with plotters' SVG backend (text is written as SVG `<text>`, so no font files are needed).

use std::path::Path;

use plotters::prelude::*;

use crate::m1_passthrough::{Point, Target};
use crate::BenchResult;

const TARGETS: [(Target, RGBColor); 3] = [
    (Target::Direct, RGBColor(31, 119, 180)),
    (Target::Gateway, RGBColor(214, 39, 40)),
    (Target::Nginx, RGBColor(44, 160, 44)),
];

/// Draws both panels side by side into `path`.
pub fn draw_m1(path: &Path, points: &[Point]) -> BenchResult<()> {
    let root = SVGBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    panel(
        &left,
        points,
        "M1 throughput, tools/call echo",
        "requests/s",
        |point| point.stats.per_second(),
    )?;
    panel(
        &right,
        points,
        "M1 p99 latency, tools/call echo",
        "p99 latency (µs)",
        |point| point.stats.p99_us() as f64,
    )?;
    root.present()?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    points: &[Point],
    caption: &str,
    y_label: &str,
    value: impl Fn(&Point) -> f64,
) -> BenchResult<()> {
    let x_max = points.iter().map(|p| p.concurrency).max().unwrap_or(1) as f64 * 1.08;
    let y_max = points.iter().map(&value).fold(0.0, f64::max).max(1.0) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("concurrency (parallel clients)")
        .y_desc(y_label)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    for (target, color) in TARGETS {
        let series: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.target == target)
            .map(|p| (p.concurrency as f64, value(p)))
            .collect();
        if series.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))?
            .label(target.label())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            series
                .into_iter()
                .map(|(x, y)| Circle::new((x, y), 4, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}
