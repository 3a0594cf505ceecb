//! The charts, drawn with plotters' SVG backend (text is written as SVG `<text>`, so no font
//! files are needed):
//!
//! - `m1.svg`: throughput and p99 latency against concurrency for `tools/call echo`, one line
//!   per target: M1's (solid, the fast HTTP backend: direct, gateway, nginx, direct
//!   (2026-07-28), gateway relay) and M8's (dashed, the stdio echo backend);
//! - `m1-large.svg`: the same panels for M1's 256 KiB result.
//!
//! Throughput is on a linear axis; p99 latency on a logarithmic one, since the targets differ
//! by orders of magnitude there.

use std::path::Path;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::alternatives::Tool;
use crate::m1_passthrough::{Point, Target};
use crate::BenchResult;

/// Every target's color, and whether its line is dashed (M8's stdio backend).
const TARGETS: [(Target, RGBColor, bool); 10] = [
    (Target::Direct, RGBColor(31, 119, 180), false),
    (Target::Gateway, RGBColor(214, 39, 40), false),
    (Target::Nginx, RGBColor(44, 160, 44), false),
    (Target::DirectModern, RGBColor(127, 127, 127), false),
    (Target::GatewayRelay, RGBColor(227, 119, 194), false),
    (Target::GatewayStdio, RGBColor(214, 39, 40), true),
    (Target::GatewayStdioLegacy, RGBColor(140, 86, 75), true),
    (
        Target::Tool(Tool::Supergateway),
        RGBColor(255, 127, 14),
        true,
    ),
    (
        Target::Tool(Tool::McpProxyNpm),
        RGBColor(148, 103, 189),
        true,
    ),
    (
        Target::Tool(Tool::McpProxyPython),
        RGBColor(23, 190, 207),
        true,
    ),
];

/// `m1.svg`: M1's points and M8's on the same panels.
pub fn draw_m1(path: &Path, m1: &[Point], m8: &[Point]) -> BenchResult<()> {
    let points: Vec<&Point> = m1.iter().chain(m8).collect();
    let what = if m8.is_empty() {
        "tools/call echo"
    } else {
        "echo (M1 solid, M8 stdio dashed)"
    };
    draw(path, &points, what)
}

/// `m1-large.svg`: M1's 256 KiB result.
pub fn draw_m1_large(path: &Path, points: &[Point]) -> BenchResult<()> {
    let points: Vec<&Point> = points.iter().collect();
    draw(path, &points, "tools/call large (256 KiB)")
}

/// Both panels side by side into `path`.
fn draw(path: &Path, points: &[&Point], what: &str) -> BenchResult<()> {
    let root = SVGBackend::new(path, (1200, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(600);
    let x_max = points.iter().map(|p| p.concurrency).max().unwrap_or(1) as f64 * 1.08;
    let throughput: Vec<f64> = points.iter().map(|p| p.stats.per_second()).collect();
    // Headroom above the highest point keeps the legend (upper left) clear of the lines.
    let y_max = throughput.iter().copied().fold(0.0, f64::max).max(1.0) * 1.8;
    let chart = ChartBuilder::on(&left)
        .caption(format!("throughput, {what}"), ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    panel(
        chart,
        points,
        "requests/s",
        &throughput,
        SeriesLabelPosition::UpperLeft,
    )?;
    let p99: Vec<f64> = points.iter().map(|p| p.stats.p99_us() as f64).collect();
    let (low, high) = p99
        .iter()
        .fold((f64::MAX, 1.0_f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let low = if low == f64::MAX { 1.0 } else { low };
    let chart = ChartBuilder::on(&right)
        .caption(format!("p99 latency, {what}"), ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d(0.0..x_max, ((low / 1.5).max(1.0)..high * 1.5).log_scale())?;
    // Latency grows with concurrency: the lower right stays clear.
    panel(
        chart,
        points,
        "p99 latency (µs, log scale)",
        &p99,
        SeriesLabelPosition::LowerRight,
    )?;
    root.present()?;
    Ok(())
}

/// One panel: `values[i]` is `points[i]`'s value.
fn panel<'a, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    points: &[&Point],
    y_label: &str,
    values: &[f64],
    legend: SeriesLabelPosition,
) -> BenchResult<()>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("concurrency (parallel clients)")
        .y_desc(y_label)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        // Only the labelled grid lines: a log axis would otherwise get a dense fill of them.
        .light_line_style(TRANSPARENT)
        .y_labels(12)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    for (target, color, dashed) in TARGETS {
        let series: Vec<(f64, f64)> = points
            .iter()
            .zip(values)
            .filter(|(p, _)| p.target == target)
            .map(|(p, &v)| (p.concurrency as f64, v))
            .collect();
        if series.is_empty() {
            continue;
        }
        let style = color.stroke_width(2);
        if dashed {
            chart
                .draw_series(DashedLineSeries::new(series.clone(), 8, 5, style))?
                .label(target.label())
                .legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 24, y)], 8, 5, color.stroke_width(2))
                });
        } else {
            chart
                .draw_series(LineSeries::new(series.clone(), style))?
                .label(target.label())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
                });
        }
        chart.draw_series(
            series
                .into_iter()
                .map(|(x, y)| Circle::new((x, y), 4, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}
