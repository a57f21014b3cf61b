//! The arithmetic and chart of `lopi scale`: wall times per CPU count become speedups,
//! efficiencies and Karp-Flatt serial fractions, set against Amdahl's bound and a Universal
//! Scalability Law fit. Pure: no processes, no files, so all of it is unit-tested here.

use anyhow::{bail, Result};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt;

/// The wall times of the runs at one CPU count, in ns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measured {
    pub cpus: u32,
    pub wall_ns: Vec<u64>,
}

/// One CPU count's summary. Speedup is of the median, so one noisy run does not move it.
#[derive(Debug, Clone, PartialEq)]
pub struct PointStats {
    pub cpus: u32,
    pub median_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub speedup: f64,
    pub efficiency: f64,
    /// Karp-Flatt's serial fraction: steady across N means serial work, growing means
    /// overhead. None at one CPU, where it is undefined.
    pub karp_flatt: Option<f64>,
}

/// Median in whole ns (an even count takes the floor of the mean of the middle two), None if empty.
pub fn median(values: &[u64]) -> Option<u64> {
    let mut v = values.to_vec();
    v.sort_unstable();
    let mid = v.len() / 2;
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[mid]),
        // Sorted, so the difference cannot underflow and the sum cannot overflow.
        _ => Some(v[mid - 1] + (v[mid] - v[mid - 1]) / 2),
    }
}

/// Summaries of every CPU count, sorted by count; runs given twice for one count are pooled.
///
/// Speedup is against the 1-CPU median. Without a 1-CPU point it is against the smallest
/// count n0 measured, S(N) = n0 * T(n0) / T(N): that assumes n0 CPUs scaled perfectly, so
/// such speedups are upper estimates. Errors on no runs, 0 CPUs, or a 0 ns median.
pub fn point_stats(measured: &[Measured]) -> Result<Vec<PointStats>> {
    let mut pooled: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for m in measured {
        if m.cpus == 0 {
            bail!("a measurement at 0 CPUs");
        }
        pooled.entry(m.cpus).or_default().extend(&m.wall_ns);
    }
    let mut rows = Vec::with_capacity(pooled.len());
    for (&cpus, runs) in &pooled {
        let (Some(median_ns), Some(&min_ns), Some(&max_ns)) =
            (median(runs), runs.iter().min(), runs.iter().max())
        else {
            bail!("no runs at {cpus} CPUs");
        };
        if median_ns == 0 {
            bail!("the median wall time at {cpus} CPUs is 0 ns");
        }
        rows.push((cpus, median_ns, min_ns, max_ns));
    }
    let Some(&(n0, t0, _, _)) = rows.first() else {
        bail!("no measurements");
    };
    let base = f64::from(n0) * t0 as f64;
    Ok(rows
        .into_iter()
        .map(|(cpus, median_ns, min_ns, max_ns)| {
            let n = f64::from(cpus);
            let speedup = base / median_ns as f64;
            let karp_flatt = karp_flatt(speedup, n);
            PointStats { cpus, median_ns, min_ns, max_ns, speedup, efficiency: speedup / n, karp_flatt }
        })
        .collect())
}

/// e = (1/S - 1/N) / (1 - 1/N); None where it is undefined (N <= 1) or S is not positive.
fn karp_flatt(speedup: f64, cpus: f64) -> Option<f64> {
    (cpus > 1.0 && speedup > 0.0 && speedup.is_finite())
        .then(|| (1.0 / speedup - 1.0 / cpus) / (1.0 - 1.0 / cpus))
}

/// Amdahl's bound on speedup when `serial_fraction` of the one-CPU time cannot run in parallel.
pub fn amdahl(serial_fraction: f64, cpus: f64) -> f64 {
    1.0 / (serial_fraction + (1.0 - serial_fraction) / cpus)
}

/// Universal Scalability Law: sigma is contention (queueing on shared work), kappa coherency
/// (crosstalk between CPUs), which is what makes speedup peak and then fall.
#[derive(Debug, Clone, PartialEq)]
pub struct Usl {
    pub sigma: f64,
    pub kappa: f64,
    /// Where speedup peaks; None if it keeps rising (no coherency cost) or never rises.
    pub peak_cpus: Option<f64>,
    pub peak_speedup: Option<f64>,
}

impl Usl {
    fn new(sigma: f64, kappa: f64) -> Usl {
        let peak_cpus = (kappa > 0.0 && sigma < 1.0).then(|| ((1.0 - sigma) / kappa).sqrt());
        let mut usl = Usl { sigma, kappa, peak_cpus, peak_speedup: None };
        usl.peak_speedup = peak_cpus.map(|n| usl.speedup(n));
        usl
    }

    /// S(N) = N / (1 + sigma (N-1) + kappa N (N-1)).
    pub fn speedup(&self, cpus: f64) -> f64 {
        cpus / (1.0 + self.sigma * (cpus - 1.0) + self.kappa * cpus * (cpus - 1.0))
    }
}

/// Why no USL fit is offered; told to the user rather than drawn as a misleading curve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UslRefusal(pub String);

impl fmt::Display for UslRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UslRefusal {}

/// Least-squares USL fit of (cpus, speedup) points, with sigma, kappa >= 0.
///
/// The model is linear in its parameters once rearranged, N/S - 1 = sigma (N-1) + kappa N (N-1),
/// so it is solved in closed form: no iteration, no starting guess, no local minima.
pub fn fit_usl(points: &[(f64, f64)]) -> Result<Usl, UslRefusal> {
    let refuse = |why: String| Err(UslRefusal(why));
    if let Some((n, s)) = points.iter().find(|(n, s)| !(n.is_finite() && *n >= 1.0 && s.is_finite() && *s > 0.0)) {
        return refuse(format!("a USL fit needs CPU counts >= 1 and positive speedups, not speedup {s} at {n} CPUs"));
    }
    let mut counts: Vec<f64> = points.iter().map(|p| p.0).collect();
    counts.sort_by(f64::total_cmp);
    counts.dedup();
    if counts.len() < 3 {
        return refuse(format!("a USL fit needs at least three CPU counts; {} were measured", counts.len()));
    }
    // Rows [x1, x2, y] of y = sigma x1 + kappa x2, and the 2x2 normal equations.
    let rows: Vec<[f64; 3]> = points.iter().map(|&(n, s)| [n - 1.0, n * (n - 1.0), n / s - 1.0]).collect();
    let dot = |i: usize, j: usize| rows.iter().map(|r| r[i] * r[j]).sum::<f64>();
    let (a, b, c, p, q) = (dot(0, 0), dot(0, 1), dot(1, 1), dot(0, 2), dot(1, 2));
    let det = a * c - b * b;
    let degenerate = || refuse("the USL fit is degenerate: these CPU counts cannot tell contention from coherency".into());
    // Relative test: the columns are nearly collinear when det is tiny beside a*c (NaN on overflow).
    if det.is_nan() || det <= 1e-12 * a * c {
        return degenerate();
    }
    let (mut sigma, mut kappa) = ((p * c - b * q) / det, (a * q - b * p) / det);
    if sigma < 0.0 || kappa < 0.0 {
        // Negative costs are meaningless (super-linear data). In two unknowns the constrained
        // optimum lies on an axis: fit each parameter alone (clamped at 0), keep the better.
        let sse = |(s, k): (f64, f64)| rows.iter().map(|r| (r[2] - s * r[0] - k * r[1]).powi(2)).sum::<f64>();
        let (on_sigma, on_kappa) = (((p / a).max(0.0), 0.0), (0.0, (q / c).max(0.0)));
        (sigma, kappa) = if sse(on_sigma) <= sse(on_kappa) { on_sigma } else { on_kappa };
    }
    if !(sigma.is_finite() && kappa.is_finite()) {
        return degenerate();
    }
    Ok(Usl::new(sigma, kappa))
}

/// A measured point as (cpus, median speedup, speedup at max time, speedup at min time);
/// the bar falls back to the median where a time is 0. None if the speedup is not finite.
fn plotted(p: &PointStats) -> Option<(f64, f64, f64, f64)> {
    let y = p.speedup;
    let at = |t: u64| Some(y * p.median_ns as f64 / t as f64).filter(|v| v.is_finite()).unwrap_or(y);
    (y.is_finite() && y >= 0.0).then(|| (f64::from(p.cpus), y, at(p.max_ns), at(p.min_ns)))
}

/// Speedup against CPUs as an 800x500 SVG. Text is written as <text> for the viewer to
/// render (plotters without its `ttf` feature), so no font is read here or needed to run.
pub fn chart_svg(points: &[PointStats], amdahl_serial: Option<f64>, usl: Option<&Usl>, title: &str) -> Result<String> {
    if let Some(s) = amdahl_serial.filter(|s| !(0.0..=1.0).contains(s)) {
        bail!("an Amdahl serial fraction lies within 0..=1, not {s}");
    }
    let measured: Vec<_> = points.iter().filter_map(plotted).collect();
    // Past the largest count, so the curves' bounds and any peak are visible.
    let x_max = measured.iter().map(|m| 2.0 * m.0).fold(4.0, f64::max);
    let xs: Vec<f64> = (0..=200).map(|i| 1.0 + (x_max - 1.0) * f64::from(i) / 200.0).collect();
    let curve = |f: &dyn Fn(f64) -> f64| -> Vec<(f64, f64)> {
        xs.iter().map(|&x| (x, f(x))).filter(|(_, y)| y.is_finite() && *y >= 0.0).collect()
    };
    let amdahl_curve = amdahl_serial.map(|s| curve(&|x| amdahl(s, x)));
    let usl_curve = usl.map(|u| curve(&|x| u.speedup(x)));
    let curves = amdahl_curve.iter().chain(&usl_curve).flatten();
    let y_max = 1.1 * measured.iter().map(|m| m.3).chain(curves.map(|c| c.1)).fold(1.0, f64::max);
    if !y_max.is_finite() {
        bail!("speedups too large to chart");
    }
    // The ideal line would dwarf real speedups, so it stops at the top of the chart.
    let ideal_end = x_max.min(y_max);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
        chart.configure_mesh().x_desc("CPUs").y_desc("speedup").x_label_formatter(&|x| format!("{x}")).draw()?;

        let grey = RGBColor(150, 150, 150);
        let line = vec![(1.0, 1.0), (ideal_end, ideal_end)];
        chart
            .draw_series(DashedLineSeries::new(line, 6, 4, grey.stroke_width(1)))?
            .label("ideal (linear)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
        let usl_colour = RGBColor(0, 140, 0);
        let labelled = [
            (amdahl_curve, RED, amdahl_serial.map(|s| format!("Amdahl (serial fraction {s:.3})"))),
            (usl_curve, usl_colour, usl.map(|u| format!("USL (sigma {:.4}, kappa {:.5})", u.sigma, u.kappa))),
        ];
        for (data, colour, label) in labelled {
            if let (Some(data), Some(label)) = (data, label) {
                chart
                    .draw_series(LineSeries::new(data, colour.stroke_width(2)))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            }
        }
        chart.draw_series(measured.iter().map(|&(x, _, lo, hi)| PathElement::new(vec![(x, lo), (x, hi)], BLUE)))?;
        chart
            .draw_series(measured.iter().map(|&(x, y, _, _)| Circle::new((x, y), 4, BLUE.filled())))?
            .label("measured (median, min-max)")
            .legend(|(x, y)| Circle::new((x + 10, y), 4, BLUE.filled()));
        // Lower right: measured points never reach there (x ends at twice the largest count).
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(cpus: u32, wall_ns: &[u64]) -> Measured {
        Measured { cpus, wall_ns: wall_ns.to_vec() }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[5, 1, 3]), Some(3));
        assert_eq!(median(&[40, 10, 30, 20]), Some(25));
        assert_eq!(median(&[1, 2]), Some(1));
        assert_eq!(median(&[u64::MAX, u64::MAX]), Some(u64::MAX));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn karp_flatt_bounds() {
        assert_eq!(karp_flatt(2.0, 2.0), Some(0.0));
        assert_eq!(karp_flatt(1.0, 2.0), Some(1.0));
        assert_eq!(karp_flatt(1.0, 1.0), None);
    }

    #[test]
    fn stats_against_one_cpu() {
        let stats = point_stats(&[measured(2, &[50, 60, 40]), measured(1, &[100]), measured(1, &[90, 110])]).unwrap();
        assert_eq!(stats.iter().map(|p| p.cpus).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((stats[1].median_ns, stats[1].min_ns, stats[1].max_ns), (50, 40, 60));
        assert_eq!((stats[1].speedup, stats[1].efficiency, stats[1].karp_flatt), (2.0, 1.0, Some(0.0)));
        assert_eq!(stats[0].karp_flatt, None);
    }

    #[test]
    fn stats_without_one_cpu_scale_by_smallest_count() {
        let stats = point_stats(&[measured(4, &[50]), measured(2, &[100])]).unwrap();
        assert_eq!((stats[0].speedup, stats[1].speedup), (2.0, 4.0));
    }

    #[test]
    fn stats_refuse_bad_input() {
        assert!(point_stats(&[]).is_err());
        assert!(point_stats(&[measured(1, &[])]).is_err());
        assert!(point_stats(&[measured(0, &[5])]).is_err());
        assert!(point_stats(&[measured(1, &[0, 0, 7])]).is_err());
    }

    #[test]
    fn amdahl_matches_the_thesis_bound() {
        assert!((amdahl(0.36, 2.0) - 1.4706).abs() < 1e-4);
        assert_eq!(amdahl(0.0, 8.0), 8.0);
    }

    #[test]
    fn usl_recovers_known_parameters() {
        let truth = Usl::new(0.05, 0.002);
        let points: Vec<_> = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0].map(|n| (n, truth.speedup(n))).to_vec();
        let fit = fit_usl(&points).unwrap();
        assert!((fit.sigma - 0.05).abs() < 1e-6 && (fit.kappa - 0.002).abs() < 1e-6, "{fit:?}");
        let peak = fit.peak_cpus.unwrap();
        assert!((peak - (0.95f64 / 0.002).sqrt()).abs() < 1e-3);
        assert!((fit.peak_speedup.unwrap() - truth.speedup(peak)).abs() < 1e-6);
    }

    #[test]
    fn usl_refuses_too_few_counts_and_bad_points() {
        let err = fit_usl(&[(1.0, 1.0), (2.0, 1.8), (2.0, 1.9)]).unwrap_err();
        assert_eq!(err.to_string(), "a USL fit needs at least three CPU counts; 2 were measured");
        assert!(fit_usl(&[]).is_err());
        assert!(fit_usl(&[(1.0, 1.0), (2.0, f64::NAN), (4.0, 3.0)]).is_err());
        assert!(fit_usl(&[(1.0, 1.0), (2.0, 0.0), (4.0, 3.0)]).is_err());
    }

    #[test]
    fn usl_of_super_linear_data_is_not_negative() {
        let fit = fit_usl(&[(1.0, 1.0), (2.0, 2.2), (4.0, 4.8), (8.0, 10.0)]).unwrap();
        assert!(fit.sigma >= 0.0 && fit.kappa >= 0.0, "{fit:?}");
        assert_eq!((fit.sigma, fit.kappa, fit.peak_cpus), (0.0, 0.0, None));
    }

    #[test]
    fn chart_renders_without_fonts() {
        let stats = point_stats(&[measured(1, &[100, 104]), measured(2, &[60, 70]), measured(4, &[40])]).unwrap();
        let usl = fit_usl(&stats.iter().map(|p| (f64::from(p.cpus), p.speedup)).collect::<Vec<_>>()).unwrap();
        let svg = chart_svg(&stats, Some(0.36), Some(&usl), "scaling of <demo>").unwrap();
        assert!(svg.contains("<svg"));
        for label in ["ideal (linear)", "Amdahl (serial fraction 0.360)", "USL (sigma", "measured (median", "CPUs", "speedup", "&lt;demo&gt;"] {
            assert!(svg.contains(label), "{label} missing");
        }
        assert!(chart_svg(&[], None, None, "").unwrap().contains("<svg"));
        assert!(chart_svg(&stats, Some(f64::NAN), None, "").is_err());
    }
}
