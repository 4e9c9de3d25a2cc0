//! 360° commands: `data walk360` (a walk rendered through a splat scene), `data split360` (frames
//! into a rig's perspective images) and `render --equirect`, on a scene made here that
//! surrounds the walk, and on the shared real panoramas.

use std::path::{Path, PathBuf};

use ember_data::{CameraModel, Dataset, DatasetOptions, EquirectRig, Pose, Splats, write_splats};

use crate::common::{arg, data_path, fresh_folder, stdout, trainer};

/// A fresh scratch folder for one test.
fn folder(name: &str) -> PathBuf {
    fresh_folder(&format!("panorama-{name}"))
}

/// 800 Gaussians on a sphere of radius 4 about the origin, coloured by their direction: every
/// panorama from near the centre sees them all around. They barely overlap: where large
/// Gaussians overlap, `--projection cube` composites them in each face's own depth order
/// (distance along its axis), and near an edge two faces can disagree (README, "360°
/// captures").
fn write_surrounding_scene(path: &Path) {
    let n = 800;
    let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
    let mut means = Vec::with_capacity(n);
    let mut sh_dc = Vec::with_capacity(n);
    for i in 0..n {
        let y = 1.0 - 2.0 * (i as f64 + 0.5) / n as f64;
        let r = (1.0 - y * y).sqrt();
        let a = golden * i as f64;
        let d = [r * a.cos(), y, r * a.sin()];
        means.push(d.map(|v| (4.0 * v) as f32));
        // Colour 0.5 + 0.4 d, through the DC coefficient (colour = 0.2821 dc + 0.5).
        sh_dc.push(d.map(|v| (0.4 * v / 0.282_094_8) as f32));
    }
    let splats = Splats {
        means,
        quats: vec![[1.0, 0.0, 0.0, 0.0]; n],
        log_scales: vec![[-1.9; 3]; n],
        opacity_logits: vec![4.0; n],
        sh_dc,
        sh_rest: Vec::new(),
        sh_degree: 0,
    };
    write_splats(path, &splats).expect("the scene");
}

fn ok(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn error_of(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "{}", stdout(out));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `data walk360` through the scene of [`write_surrounding_scene`]: nine PNG frames `width` wide
/// on a circle of radius 0.5, with `points` points; the walk's folder and the command's output.
fn write_walk(dir: &Path, width: u32, points: u32) -> (PathBuf, std::process::Output) {
    let scene = dir.join("scene.ply");
    write_surrounding_scene(&scene);
    let walk = dir.join("walk");
    let (width, points) = (width.to_string(), points.to_string());
    let out = trainer(&[
        "data",
        "walk360",
        arg(&scene),
        "--out",
        arg(&walk),
        "--frames",
        "9",
        "--width",
        &width,
        "--radius",
        "0.5",
        "--png",
        "--points",
        &points,
    ]);
    ok(&out, "walk360");
    (walk, out)
}

/// `data.whole_panoramas`: a walk's training frames load as whole panoramas (its held-out
/// frames still as the rig's views, which evaluation measures), a run trains on them and its
/// loss falls, and what needs pinhole training views is refused by key.
#[test]
fn a_walk_trains_on_its_whole_panoramas() {
    let dir = folder("whole");
    let (walk, _) = write_walk(&dir, 128, 400);
    let options = DatasetOptions {
        whole_panoramas: true,
        ..DatasetOptions::default()
    };
    let dataset = Dataset::load(&walk, &options).expect("the walk loads whole");
    assert_eq!((dataset.train.len(), dataset.test.len()), (7, 20));
    for view in &dataset.train {
        assert_eq!(view.model, CameraModel::Equirectangular, "{}", view.name);
        assert_eq!((view.intrinsics.width, view.intrinsics.height), (128, 64));
    }
    assert!(dataset.test.iter().all(|v| v.model == CameraModel::Pinhole));

    let run = dir.join("run");
    let out = trainer(&[
        "--data",
        arg(&walk),
        "--out",
        arg(&run),
        "--steps",
        "60",
        "--set",
        "data.whole_panoramas=true",
        "--set",
        "eval.every=60",
        "--set",
        "eval.lpips=\"never\"",
        "--set",
        "output.log_every=10",
        "--set",
        "output.loss_every=10",
    ]);
    ok(&out, "training on whole panoramas");
    let csv = std::fs::read_to_string(run.join("train.csv")).expect("train.csv");
    let losses: Vec<f64> = csv
        .lines()
        .skip(1)
        .map(|line| line.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    // Each logged loss is one panorama's; the run is deterministic (the preset's seed). Its
    // 400 Gaussians are about a pixel of these 128x64 panoramas each: the loss falls slowly.
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(last < 0.95 * first, "the loss falls: {losses:?}");
    let eval = std::fs::read_to_string(run.join("eval.csv")).expect("eval.csv");
    // The preset's rig is the cube's six faces: two held-out frames, twelve views.
    assert_eq!(
        eval.lines().filter(|l| l.starts_with("60,frames/")).count(),
        12,
        "the held-out frames are measured through the rig: {eval}"
    );

    let refused = dir.join("refused");
    for (name, sets) in [
        ("poses.refine", &["poses.refine=true"][..]),
        (
            "resolution.start",
            &["resolution.start=2", "resolution.full_at=100"],
        ),
        ("data.eval_split", &["data.eval_split=\"train\""]),
    ] {
        let mut args = vec![
            "--data",
            arg(&walk),
            "--out",
            arg(&refused),
            "--steps",
            "1",
            "--set",
            "data.whole_panoramas=true",
        ];
        for set in sets {
            args.extend(["--set", set]);
        }
        let err = error_of(&trainer(&args));
        assert!(
            err.contains(&format!("`{name}`")) && err.contains("pinhole"),
            "{name}: {err}"
        );
    }
}

#[test]
fn a_walk_splits_into_the_views_training_cuts_and_renders_back_seamlessly() {
    let dir = folder("walk");
    let (walk, out) = write_walk(&dir, 256, 100);
    let scene = dir.join("scene.ply");
    ok(&out, "walk360");
    assert!(
        stdout(&out).contains("9 frames of 256x128"),
        "{}",
        stdout(&out)
    );
    let rig = EquirectRig {
        size: Some(40),
        ..EquirectRig::default()
    };
    let options = DatasetOptions {
        equirect: rig.clone(),
        ..DatasetOptions::default()
    };
    let panoramas = Dataset::load(&walk, &options).expect("the walk loads as a 360° dataset");
    assert_eq!((panoramas.train.len(), panoramas.test.len()), (70, 20));
    assert_eq!(panoramas.points.as_ref().map(|p| p.len()), Some(100));

    // split360 with the same rig: the same views, poses and split, the same pixels (PNG).
    let split = dir.join("split");
    let out = trainer(&[
        "data",
        "split360",
        arg(&walk),
        "--out",
        arg(&split),
        "--size",
        "40",
        "--png",
    ]);
    ok(&out, "split360");
    assert!(
        stdout(&out).contains("transforms.json written"),
        "{}",
        stdout(&out)
    );
    let views = Dataset::load(&split, &DatasetOptions::default()).expect("the split loads");
    assert_eq!((views.train.len(), views.test.len()), (70, 20));
    assert_eq!(views.points.as_ref().map(|p| p.len()), Some(100));
    for a in panoramas.test.iter().chain(&panoramas.train) {
        // `frames/00000.png#3` is `images/view_03/00000.png`, in the same split.
        let (frame, index) = a.name.split_once('#').unwrap();
        let stem = Path::new(frame).file_stem().unwrap().to_str().unwrap();
        let name = format!(
            "images/view_{:02}/{stem}.png",
            index.parse::<u32>().unwrap()
        );
        let held_out = panoramas.test.contains(a);
        let split = if held_out { &views.test } else { &views.train };
        let b = split
            .iter()
            .find(|b| b.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        assert!((0..9).all(|i| (a.pose.rotation[i] - b.pose.rotation[i]).abs() < 1e-9));
        assert!((0..3).all(|i| (a.pose.translation[i] - b.pose.translation[i]).abs() < 1e-9));
        assert_eq!(a.intrinsics, b.intrinsics);
        assert_eq!(
            a.source.decode().unwrap(),
            b.source.decode().unwrap(),
            "{}",
            a.name
        );
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(split.join("rig_config.json")).unwrap()).unwrap();
    let cameras = config[0]["cameras"].as_array().unwrap();
    assert_eq!(cameras.len(), 10);
    assert_eq!(cameras[0]["ref_sensor"], true);
    assert_eq!(cameras[2]["image_prefix"], "view_02/");
    // View 2 looks a quarter turn right of view 0: a rotation of 90° about y.
    let q: Vec<f64> = cameras[2]["cam_from_rig_rotation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        (q[0].abs() - 0.5f64.sqrt()).abs() < 1e-9 && (q[2].abs() - 0.5f64.sqrt()).abs() < 1e-9,
        "{q:?}"
    );
    // A second split into the same folder is refused: nothing is overwritten.
    let again = trainer(&["data", "split360", arg(&walk), "--out", arg(&split)]);
    assert!(error_of(&again).contains("exists"), "{}", error_of(&again));

    // render --equirect from a frame's pose draws that frame, seamlessly.
    let frame = &panoramas.train[0];
    // The panorama's own pose: the view's, turned back by its rig rotation.
    let rig_rotation = frame.source.panorama_view.unwrap().rotation;
    let pose = frame.pose.turned(&transpose(&rig_rotation));
    let drawn = render_equirect(&scene, &dir, "pano", &pose, &[]);
    let source = image::open(walk.join(frame.name.split_once('#').unwrap().0))
        .unwrap()
        .into_rgb8();
    assert_eq!(drawn.dimensions(), (256, 128));
    assert_eq!(drawn, source, "render --equirect draws the walk's frame");
    // Seams: the camera turned right by 45° draws the same panorama shifted by an eighth of its
    // width. On the sphere that holds everywhere, poles included; through a cube's faces, whose
    // centres the turn moves to where the first one's seams were (columns 32, 96, 160, 224),
    // it holds to the stitching's filtering within 40° of the horizon.
    let half = 0.5f64.sqrt();
    let turned = pose.turned(&[half, 0.0, -half, 0.0, 1.0, 0.0, half, 0.0, half]);
    let shifted = render_equirect(&scene, &dir, "turned", &turned, &[]);
    let sphere = shifted_psnr(&shifted, &drawn, 32, 0..128);
    assert!(sphere > 45.0, "the sphere turned by 45°: {sphere:.1} dB");
    let cube = render_equirect(&scene, &dir, "cube", &pose, &["--projection", "cube"]);
    let cube_turned = render_equirect(
        &scene,
        &dir,
        "cube-turned",
        &turned,
        &["--projection", "cube"],
    );
    let seams = shifted_psnr(&cube_turned, &cube, 32, 36..92);
    assert!(seams > 30.0, "the cube turned by 45°: {seams:.1} dB");
    // The two agree up to the stitch's filtering, which at this size (faces of 81 pixels, splats
    // of about 1.5 pixels) blurs what the sphere draws sharp: 28.4 dB when written.
    let agree = shifted_psnr(&cube, &drawn, 0, 0..128);
    println!(
        "turned by 45°: sphere {sphere:.1} dB, cube {seams:.1} dB; cube against sphere {agree:.1} dB"
    );
    assert!(agree > 25.0, "the cube against the sphere: {agree:.1} dB");
}

/// PSNR of `shifted` against `image` moved left by `shift` columns (wrapping around), over the
/// rows `rows`.
fn shifted_psnr(
    shifted: &image::RgbImage,
    image: &image::RgbImage,
    shift: u32,
    rows: std::ops::Range<u32>,
) -> f64 {
    let (width, count) = (image.width(), rows.len());
    let mut squared = 0.0;
    for y in rows {
        for x in 0..width {
            let a = shifted.get_pixel(x, y).0;
            let b = image.get_pixel((x + shift) % width, y).0;
            squared += (0..3)
                .map(|c| (f64::from(a[c]) - f64::from(b[c])).powi(2))
                .sum::<f64>();
        }
    }
    let mse = squared / (count as f64 * f64::from(width) * 3.0);
    10.0 * (255.0f64.powi(2) / mse.max(1.0 / 12.0)).log10()
}

/// `trainer render SCENE --camera NAME.json --equirect 256 --out NAME.png` and `extra` from
/// `pose`, read back.
fn render_equirect(
    scene: &Path,
    dir: &Path,
    name: &str,
    pose: &Pose,
    extra: &[&str],
) -> image::RgbImage {
    let camera = ember_data::camera::camera_params(
        pose,
        &ember_data::Intrinsics {
            fx: 1.0,
            fy: 1.0,
            cx: 0.0,
            cy: 0.0,
            width: 256,
            height: 128,
        },
    );
    let camera_file = dir.join(format!("{name}.json"));
    std::fs::write(&camera_file, serde_json::to_vec(&camera).unwrap()).unwrap();
    let out_file = dir.join(format!("{name}.png"));
    let mut args = vec![
        "render",
        arg(scene),
        "--camera",
        arg(&camera_file),
        "--equirect",
        "256",
        "--out",
        arg(&out_file),
    ];
    args.extend_from_slice(extra);
    let out = trainer(&args);
    ok(&out, name);
    image::open(&out_file).unwrap().into_rgb8()
}

fn transpose(r: &[f64; 9]) -> [f64; 9] {
    [r[0], r[3], r[6], r[1], r[4], r[7], r[2], r[5], r[8]]
}

#[test]
fn the_shared_panoramas_split_for_colmap() {
    let Some(source) = data_path("equirect/py360convert_demo_equirec.png") else {
        return;
    };
    let dir = folder("real");
    let frames = dir.join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    std::fs::copy(&source, frames.join("a.png")).unwrap();
    std::fs::copy(&source, frames.join("b.png")).unwrap();
    let out_dir = dir.join("out");
    let out = trainer(&[
        "data",
        "split360",
        arg(&frames),
        "--out",
        arg(&out_dir),
        "--size",
        "64",
    ]);
    ok(&out, "split360 of a folder");
    assert!(
        stdout(&out).contains("2 frames of 1024x512 -> 20 views of 64x64"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("100.0% of the sphere"),
        "{}",
        stdout(&out)
    );
    assert!(!out_dir.join("transforms.json").exists());
    for k in 0..10 {
        for name in ["a.jpg", "b.jpg"] {
            let view = out_dir.join(format!("images/view_{k:02}/{name}"));
            let image = image::open(&view).unwrap();
            assert_eq!((image.width(), image.height()), (64, 64));
        }
    }
    assert!(out_dir.join("rig_config.json").is_file());
    let leftovers: Vec<_> = walk(&out_dir)
        .into_iter()
        .filter(|p| p.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Every file under `dir`, as strings.
fn walk(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path.display().to_string());
        }
    }
    files
}

#[test]
fn bad_frames_and_rigs_are_refused_by_name() {
    let dir = folder("bad");
    let frames = dir.join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    image::RgbImage::new(64, 32)
        .save(frames.join("a.png"))
        .unwrap();
    image::RgbImage::new(60, 32)
        .save(frames.join("b.png"))
        .unwrap();
    let out = trainer(&[
        "data",
        "split360",
        arg(&frames),
        "--out",
        arg(&dir.join("o1")),
    ]);
    let message = error_of(&out);
    assert!(
        message.contains("b.png") && message.contains("60x32"),
        "{message}"
    );

    std::fs::remove_file(frames.join("b.png")).unwrap();
    let out = trainer(&[
        "data",
        "split360",
        arg(&frames),
        "--out",
        arg(&dir.join("o2")),
        "--views",
        "0",
        "--no-poles",
    ]);
    assert!(
        error_of(&out).contains("covers nothing"),
        "{}",
        error_of(&out)
    );
    let out = trainer(&[
        "data",
        "split360",
        arg(&frames),
        "--out",
        arg(&dir.join("o3")),
        "--fov",
        "180",
    ]);
    assert!(error_of(&out).contains("fov_deg"), "{}", error_of(&out));

    // A transforms.json naming a frame that is not there.
    let json = r#"{"camera_model": "EQUIRECTANGULAR", "frames": [
        {"file_path": "../frames/a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]},
        {"file_path": "../frames/gone.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}]}"#;
    let described = dir.join("scene");
    std::fs::create_dir_all(&described).unwrap();
    std::fs::write(described.join("transforms.json"), json).unwrap();
    let out = trainer(&[
        "data",
        "split360",
        arg(&described),
        "--out",
        arg(&dir.join("o4")),
    ]);
    assert!(
        error_of(&out).contains("frames/gone.png"),
        "{}",
        error_of(&out)
    );
    // Output into the input is refused.
    let out = trainer(&[
        "data",
        "split360",
        arg(&frames),
        "--out",
        arg(&frames.join("inside")),
    ]);
    assert!(
        error_of(&out).contains("inside the input"),
        "{}",
        error_of(&out)
    );
    let out = trainer(&["render", "x.ply", "--camera", "c.json", "--equirect", "255"]);
    assert!(!out.status.success());
}
