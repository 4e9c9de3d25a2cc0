//! Agreement with gsplat's reference image and gradients, through the projection.

use super::*;

fn check_oracle(case: &str) {
    let Some(file) = OracleCase::load(case) else {
        return;
    };
    let (means, quats, log_scales, logits, sh) = (
        file.get("means"),
        file.get("quats"),
        file.get("scales"),
        file.get("opacities"),
        file.get("coeffs"),
    );
    let arrays = ProjectArrays {
        means: &means,
        quats: &quats,
        log_scales: &log_scales,
        opacity_logits: &logits,
        sh: &sh,
        sh_coeffs: 16,
    };
    let n = logits.len();
    let camera = oracle_camera();
    let options = ProjectOptions {
        sh_degree: Some(3),
        view_dir_grad: false,
        ..ProjectOptions::default()
    };
    let proj = match project::forward(&arrays, &camera, &options) {
        Ok(p) => p,
        Err(e) => panic!("{case}: projection refused: {e}"),
    };
    let splats = Splats {
        xy: proj.xy.clone(),
        depth: proj.depth.clone(),
        conic: proj.conic.clone(),
        color: proj.color.clone(),
        opacity: proj.opacity.clone(),
        radius: proj.radius.clone(),
    };
    let (w, h) = (camera.width as usize, camera.height as usize);
    let bins = bin(&splats, camera.width, camera.height);
    assert_eq!(
        tiles_per_gaussian(&bins, n),
        proj.tiles,
        "{case}: binned tiles differ from the projection's tile counts"
    );
    let bg = [0.0; 3];
    let out = forward(&splats, &bins, bg);

    let ref_img = file.get("out_img");
    let v_img = file.get("v_out_img");
    let channels = |img: &[f64], lo: usize, hi: usize| -> Vec<f64> {
        img.chunks_exact(4)
            .flat_map(|p| p[lo..hi].to_vec())
            .collect()
    };
    let pixels = vec![true; w * h];
    let ref_conics = file.get("conics");
    let kept: Vec<bool> = (0..n)
        .map(|i| ref_conics[3 * i..3 * i + 3].iter().any(|v| *v != 0.0))
        .collect();
    let all = vec![true; n];

    let mut report = Vec::new();
    let mut failed = Vec::new();
    let mut compare = |name: &str, got: &[f64], want: &[f64], width: usize, rows: &[bool]| {
        let (ratio, abs) = oracle_err(got, want, width, rows);
        report.push(format!(
            "{name}: max |delta| {abs:.3e} ({ratio:.2e} of the tolerance)"
        ));
        if ratio >= 1.0 {
            failed.push(name.to_string());
        }
    };
    compare("rgb", &out.rgb, &channels(&ref_img, 0, 3), 3, &pixels);
    compare("alpha", &out.alpha, &channels(&ref_img, 3, 4), 1, &pixels);

    let v_rgb = channels(&v_img, 0, 3);
    let v_alpha = channels(&v_img, 3, 4);
    let v_depth = vec![0.0; w * h];
    let grads = RasterOutputGrads {
        rgb: &v_rgb,
        alpha: &v_alpha,
        depth: &v_depth,
    };
    let g = backward(&splats, &bins, bg, &out, &grads);
    compare("v_xy", &g.xy, &file.get("v_xy"), 2, &kept);
    compare("v_conics", &g.conic, &file.get("v_conics"), 3, &kept);

    // The f32 kernels on the same splats.
    let widen = |v: &[f32]| v.iter().map(|x| f64::from(*x)).collect::<Vec<f64>>();
    let narrow = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
    let s32 = splats.to_f32();
    let out32 = forward(&s32, &bins, [0.0f32; 3]);
    compare(
        "rgb (f32)",
        &widen(&out32.rgb),
        &channels(&ref_img, 0, 3),
        3,
        &pixels,
    );
    compare(
        "alpha (f32)",
        &widen(&out32.alpha),
        &channels(&ref_img, 3, 4),
        1,
        &pixels,
    );
    let (v_rgb32, v_alpha32, v_depth32) = (narrow(&v_rgb), narrow(&v_alpha), narrow(&v_depth));
    let grads32 = RasterOutputGrads {
        rgb: &v_rgb32,
        alpha: &v_alpha32,
        depth: &v_depth32,
    };
    let g32 = backward(&s32, &bins, [0.0f32; 3], &out32, &grads32);
    compare("v_xy (f32)", &widen(&g32.xy), &file.get("v_xy"), 2, &kept);
    compare(
        "v_conics (f32)",
        &widen(&g32.conic),
        &file.get("v_conics"),
        3,
        &kept,
    );

    let up = ProjectOutputGrads {
        xy: &g.xy,
        depth: &g.depth,
        conic: &g.conic,
        color: &g.color,
        opacity: &g.opacity,
    };
    let pg = match project::backward(&arrays, &camera, &options, &up) {
        Ok(p) => p,
        Err(e) => panic!("{case}: projection backward refused: {e}"),
    };
    compare("v_means", &pg.means, &file.get("v_means"), 3, &all);
    compare("v_quats", &pg.quats, &file.get("v_quats"), 4, &all);
    compare("v_scales", &pg.log_scales, &file.get("v_scales"), 3, &all);
    compare("v_coeffs", &pg.sh, &file.get("v_coeffs"), 48, &all);
    compare(
        "v_opacities",
        &pg.opacity_logits,
        &file.get("v_opacities"),
        1,
        &all,
    );
    println!("{case} ({n} Gaussians):\n  {}", report.join("\n  "));
    assert!(
        failed.is_empty(),
        "{case}: outside the oracle tolerance: {failed:?}"
    );
}

#[test]
fn matches_gsplat_oracle_tiny() {
    check_oracle("tiny");
}

#[test]
fn matches_gsplat_oracle_basic() {
    check_oracle("basic");
}
