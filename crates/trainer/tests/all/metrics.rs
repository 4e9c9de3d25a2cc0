//! `trainer metrics A B`: PSNR, SSIM and LPIPS of two images, its JSON, alpha compositing, and
//! its refusals.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::{arg as path, data_path, scratch, stdout, without_lpips};

/// `trainer metrics args...` with no LPIPS weights in the environment.
fn metrics(args: &[&str]) -> Output {
    without_lpips("metrics", args)
}

/// A 64x48 RGB picture, `shift` added to every channel of one half (clamped).
fn picture(shift: i16) -> image::RgbImage {
    image::RgbImage::from_fn(64, 48, |x, y| {
        let base = [(x * 4) as i16, (y * 5) as i16, ((x + y) * 2) as i16];
        image::Rgb(base.map(|c| (c + if x < 32 { shift } else { 0 }).clamp(0, 255) as u8))
    })
}

/// `trainer metrics args... --json JSON`, which must succeed: its output and the JSON.
fn measured(args: &[&str], json: &Path) -> (Output, Value) {
    let out = metrics(&[args, &["--json", path(json)]].concat());
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value = serde_json::from_slice(&std::fs::read(json).expect("JSON")).expect("JSON");
    (out, value)
}

#[test]
fn metrics_of_two_images_with_json_and_alpha() {
    let dir = scratch("metrics");
    std::fs::create_dir_all(&dir).expect("folder");
    let (a, b) = (dir.join("a.png"), dir.join("b.png"));
    picture(0).save(&a).expect("a");
    picture(12).save(&b).expect("b");
    let json = dir.join("metrics.json");
    let (out, value) = measured(&[path(&a), path(&b)], &json);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("LPIPS is off"),
        "the shipped weights measure LPIPS"
    );
    let lpips = value["lpips"]
        .as_f64()
        .expect("LPIPS with the shipped weights");
    assert!(lpips > 0.0 && lpips < 1.0, "{value}");
    // Half the pixels off by 12/255 in every channel (none clamped): MSE = (12/255)^2 / 2.
    let want = -10.0 * ((12.0f64 / 255.0).powi(2) / 2.0).log10();
    let psnr = value["psnr"].as_f64().expect("psnr");
    assert!((psnr - want).abs() < 0.01, "PSNR {psnr}, want {want}");
    let ssim = value["ssim"].as_f64().expect("ssim");
    assert!(ssim > 0.5 && ssim < 1.0, "SSIM {ssim}");
    assert_eq!(
        (value["width"].as_u64(), value["height"].as_u64()),
        (Some(64), Some(48))
    );
    assert!(
        stdout(&out).contains(&format!("PSNR {want:.2} dB")),
        "{}",
        stdout(&out)
    );

    // An RGBA image over a white background is the opaque image composited there: identical
    // images, whose PSNR is infinite (null in JSON) and SSIM 1.
    let rgba = image::RgbaImage::from_fn(64, 48, |x, y| {
        image::Rgba([200, 40, 90, ((x * 3 + y) % 256) as u8])
    });
    let flat = image::RgbImage::from_fn(64, 48, |x, y| {
        let p = rgba.get_pixel(x, y).0;
        let alpha = f32::from(p[3]) / 255.0;
        image::Rgb([0, 1, 2].map(|c| {
            let v = f32::from(p[c]) / 255.0 * alpha + (1.0 - alpha);
            (v * 255.0).round() as u8
        }))
    });
    let (with_alpha, composited) = (dir.join("alpha.png"), dir.join("white.png"));
    rgba.save(&with_alpha).expect("rgba");
    flat.save(&composited).expect("flat");
    let args = [
        path(&with_alpha),
        path(&composited),
        "--background",
        "1,1,1",
    ];
    let (_, value) = measured(&args, &dir.join("alpha.json"));
    // Rounding the composite to 8 bits leaves at most half a level per channel.
    let psnr = value["psnr"].as_f64().unwrap_or(f64::INFINITY);
    assert!(psnr > 50.0, "PSNR {psnr}");

    // With the LPIPS weights: 0 for an image against itself, a positive distance otherwise.
    if let Some(weights) = data_path("lpips/alex.safetensors") {
        let json = dir.join("lpips.json");
        let (_, value) = measured(
            &[path(&a), path(&b), "--lpips-weights", path(&weights)],
            &json,
        );
        let lpips = value["lpips"].as_f64().expect("LPIPS with weights");
        assert!(lpips > 0.0 && lpips < 1.0, "LPIPS {lpips}");
        let (_, value) = measured(
            &[path(&a), path(&a), "--lpips-weights", path(&weights)],
            &json,
        );
        assert_eq!(value["lpips"].as_f64(), Some(0.0));
        assert_eq!(value["psnr"], Value::Null);
    }
}

#[test]
fn metrics_refuse_mismatched_unreadable_and_overwriting() {
    let dir = scratch("metrics-bad");
    std::fs::create_dir_all(&dir).expect("folder");
    let (a, small) = (dir.join("a.png"), dir.join("small.png"));
    picture(0).save(&a).expect("a");
    image::RgbImage::new(32, 48).save(&small).expect("small");
    let noise = dir.join("noise.png");
    std::fs::write(&noise, b"not an image").expect("noise");
    let missing = dir.join("missing.png");
    let cases: [(Vec<&str>, &str); 4] = [
        (vec![path(&a), path(&small)], "must be the same size"),
        (vec![path(&a), path(&noise)], "noise.png"),
        (vec![path(&a), path(&missing)], "missing.png"),
        (vec![path(&a), path(&small), "--json", path(&a)], "--json"),
    ];
    for (args, expected) in cases {
        let out = metrics(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // The input was not overwritten.
    assert_eq!(image::open(&a).expect("a").to_rgb8(), picture(0));
    // Weights that do not load leave LPIPS off, with the reason, and the rest measured.
    let out = metrics(&[path(&a), path(&a), "--lpips-weights", path(&noise)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("LPIPS is off") && stderr.contains("noise.png"),
        "{stderr}"
    );
}
