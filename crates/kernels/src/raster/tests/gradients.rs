//! The gradients against f64 central differences.

use super::*;

/// The smallest distance, in log space, of any pair of the bins to the compositing thresholds:
/// alpha before the clamp vs `1/255` and `0.999`, and the transmittance after each drawn
/// Gaussian vs `1e-4`. A finite difference across one of them measures a jump, not a slope.
fn threshold_margin(s: &Splats<f64>, bins: &Bins) -> f64 {
    let mut margin = f64::INFINITY;
    let size = 16usize;
    for py in 0..bins.height() as usize {
        for px in 0..bins.width() as usize {
            let tile = (py / size) * bins.tiles_x() as usize + px / size;
            let (cx, cy) = (px as f64 + 0.5, py as f64 + 0.5);
            let mut t = 1.0f64;
            for &g in bins.tile(tile) {
                let g = g as usize;
                let (dx, dy) = (cx - s.xy[2 * g], cy - s.xy[2 * g + 1]);
                let [a, b, c] = [s.conic[3 * g], s.conic[3 * g + 1], s.conic[3 * g + 2]];
                let sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy;
                let raw = s.opacity[g] * (-sigma).exp();
                margin = margin
                    .min((raw * 255.0).ln().abs())
                    .min((raw / 0.999).ln().abs());
                let alpha = raw.min(0.999);
                if alpha < 1.0 / 255.0 {
                    continue;
                }
                let next = t * (1.0 - alpha);
                margin = margin.min((next / 1e-4).ln().abs());
                if next <= 1e-4 {
                    break;
                }
                t = next;
            }
        }
    }
    margin
}

/// Pixels whose walk stopped on the transmittance rule.
fn stopped_pixels(out: &RasterOutputs<f64>, bins: &Bins) -> usize {
    let width = bins.width() as usize;
    (0..out.last.len())
        .filter(|&i| {
            let tile = (i / width / 16) * bins.tiles_x() as usize + (i % width) / 16;
            (out.last[i] as usize) < bins.tile(tile).len()
        })
        .count()
}

/// Random image-gradient weights: the loss is `sum(w . image)`.
struct LossWeights {
    rgb: Vec<f64>,
    alpha: Vec<f64>,
    depth: Vec<f64>,
}

impl LossWeights {
    fn random(rng: &mut StdRng, pixels: usize) -> Self {
        LossWeights {
            rgb: uniform(rng, 3 * pixels, -1.0, 1.0),
            alpha: uniform(rng, pixels, -1.0, 1.0),
            depth: uniform(rng, pixels, -0.2, 0.2),
        }
    }

    fn grads(&self) -> RasterOutputGrads<'_, f64> {
        RasterOutputGrads {
            rgb: &self.rgb,
            alpha: &self.alpha,
            depth: &self.depth,
        }
    }

    fn loss(&self, out: &RasterOutputs<f64>) -> f64 {
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        dot(&out.rgb, &self.rgb) + dot(&out.alpha, &self.alpha) + dot(&out.depth, &self.depth)
    }
}

/// The input array called `name`.
fn field<'a>(s: &'a mut Splats<f64>, name: &str) -> &'a mut Vec<f64> {
    match name {
        "xy" => &mut s.xy,
        "conic" => &mut s.conic,
        "color" => &mut s.color,
        "opacity" => &mut s.opacity,
        _ => &mut s.depth,
    }
}

#[test]
fn gradients_match_central_differences() {
    let mut rng = fresh_rng("raster gradients_match_central_differences");
    let (width, height) = (20u32, 13u32);
    let eps = 1e-7;
    let mut checked = 0;
    for _ in 0..200 {
        if checked == 6 {
            break;
        }
        let n = rng.random_range(5..=8);
        let s = random_splats(&mut rng, n, width, height);
        let bins = bin(&s, width, height);
        // eps moves `sigma` by at most ~4e-5 (the conic's `dx^2 / 2` with |dx| < 26).
        if threshold_margin(&s, &bins) < 1e-4 {
            continue;
        }
        checked += 1;
        let bg: [f64; 3] = core::array::from_fn(|_| rng.random::<f64>());
        let weights = LossWeights::random(&mut rng, (width * height) as usize);
        let out = forward(&s, &bins, bg);
        assert!(
            stopped_pixels(&out, &bins) > 0,
            "the stop rule is not exercised"
        );
        let g = backward(&s, &bins, bg, &out, &weights.grads());
        let loss_at = |s: &Splats<f64>| weights.loss(&forward(s, &bins, bg));
        let fields: [(&str, &[f64]); 5] = [
            ("xy", &g.xy),
            ("conic", &g.conic),
            ("color", &g.color),
            ("opacity", &g.opacity),
            ("depth", &g.depth),
        ];
        for (name, analytic) in fields {
            for (k, want) in analytic.iter().enumerate() {
                let mut plus = s.clone();
                field(&mut plus, name)[k] += eps;
                let mut minus = s.clone();
                field(&mut minus, name)[k] -= eps;
                let numeric = (loss_at(&plus) - loss_at(&minus)) / (2.0 * eps);
                assert!(
                    (numeric - want).abs() <= 1e-6 + 1e-5 * want.abs(),
                    "{name}[{k}]: analytic {want}, central difference {numeric}"
                );
            }
        }
        for i in 0..n {
            let norm = g.xy[2 * i].hypot(g.xy[2 * i + 1]);
            assert!(g.xy_abs[i] >= norm * (1.0 - 1e-12), "xy_abs below |v_xy|");
        }
    }
    assert_eq!(checked, 6, "too few scenes away from the thresholds");
}
