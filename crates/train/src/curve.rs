//! The training curve as a small self-contained SVG: loss (top) and PSNR (bottom, training
//! views as a line, held-out evaluations as dots) against the step.

/// One logged point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurvePoint {
    /// Steps completed.
    pub step: usize,
    /// Training loss (`None` for an evaluation).
    pub loss: Option<f32>,
    /// Training-view PSNR, dB (`None` when not measured).
    pub train_psnr: Option<f32>,
    /// Held-out PSNR, dB (evaluations only).
    pub eval_psnr: Option<f32>,
}

impl CurvePoint {
    /// A training row.
    pub fn train(step: usize, loss: f32, psnr: Option<f32>) -> CurvePoint {
        CurvePoint {
            step,
            loss: Some(loss),
            train_psnr: psnr,
            eval_psnr: None,
        }
    }

    /// An evaluation.
    pub fn eval(step: usize, psnr: f32) -> CurvePoint {
        CurvePoint {
            step,
            loss: None,
            train_psnr: None,
            eval_psnr: Some(psnr),
        }
    }
}

const WIDTH: f64 = 720.0;
const PANEL: f64 = 220.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;

/// `(lo, hi)` of the finite values, padded so a flat series still has a range.
fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if lo > hi {
        return None;
    }
    let pad = ((hi - lo) * 0.05).max(1e-6);
    Some((lo - pad, hi + pad))
}

/// One panel: axes, labels, a polyline and dots.
fn panel(
    svg: &mut String,
    top: f64,
    title: &str,
    max_step: f64,
    line: &[(f64, f64)],
    dots: &[(f64, f64)],
) {
    let bottom = top + PANEL - 30.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    svg.push_str(&format!(
        "<text x=\"{LEFT}\" y=\"{}\" font-size=\"13\">{title}</text>\n",
        top + 14.0
    ));
    svg.push_str(&format!(
        "<rect x=\"{LEFT}\" y=\"{}\" width=\"{plot_w}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n",
        top + 20.0,
        bottom - top - 20.0
    ));
    let Some((lo, hi)) = range(line.iter().chain(dots).map(|p| p.1)) else {
        return;
    };
    let x = |s: f64| LEFT + plot_w * s / max_step.max(1.0);
    let y = |v: f64| bottom - (bottom - top - 20.0) * (v - lo) / (hi - lo);
    for (value, anchor) in [(lo, bottom), (hi, top + 20.0)] {
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{value:.3}</text>\n",
            LEFT - 4.0,
            anchor + 4.0
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">step {max_step:.0}</text>\n",
        WIDTH - RIGHT,
        bottom + 14.0
    ));
    if line.len() > 1 {
        let points: Vec<String> = line
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|p| format!("{:.1},{:.1}", x(p.0), y(p.1)))
            .collect();
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"#2060c0\" stroke-width=\"1.2\" points=\"{}\"/>\n",
            points.join(" ")
        ));
    }
    for p in dots.iter().filter(|p| p.1.is_finite()) {
        svg.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"#d04020\"/>\n",
            x(p.0),
            y(p.1)
        ));
    }
}

/// The SVG document for `points`.
pub fn curve_svg(points: &[CurvePoint]) -> String {
    let max_step = points.iter().map(|p| p.step).max().unwrap_or(1) as f64;
    let loss: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| p.loss.map(|l| (p.step as f64, f64::from(l))))
        .collect();
    let train_psnr: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| p.train_psnr.map(|v| (p.step as f64, f64::from(v))))
        .collect();
    let eval_psnr: Vec<(f64, f64)> = points
        .iter()
        .filter_map(|p| p.eval_psnr.map(|v| (p.step as f64, f64::from(v))))
        .collect();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        2.0 * PANEL
    );
    panel(&mut svg, 0.0, "training loss", max_step, &loss, &[]);
    panel(
        &mut svg,
        PANEL,
        "PSNR, dB (line: training view, dots: held-out views)",
        max_step,
        &train_psnr,
        &eval_psnr,
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_both_series() {
        let points = vec![
            CurvePoint::train(10, 0.3, Some(12.0)),
            CurvePoint::train(20, 0.2, Some(15.0)),
            CurvePoint::eval(20, 14.0),
        ];
        let svg = curve_svg(&points);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains("step 20"));
        // Empty input is still a valid document.
        assert!(curve_svg(&[]).contains("</svg>"));
    }
}
