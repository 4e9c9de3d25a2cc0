//! Bad and adversarial inputs to the `trainer` binary: each gets a clear error (exit 1, a
//! message naming what is wrong, no panic) and leaves every input and earlier output as it was,
//! with no `.tmp` file behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{data_path, fresh_folder, stdout, trainer};

/// A fresh scratch folder for one test.
fn folder(name: &str) -> PathBuf {
    fresh_folder(&format!("bad-inputs-{name}"))
}

/// Every file under `dir` (relative path -> contents).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).expect("readable folder") {
            let path = entry.expect("folder entry").path();
            if path.is_dir() {
                files.insert(path.strip_prefix(dir).expect("inside").join(""), Vec::new());
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("readable file");
                files.insert(path.strip_prefix(dir).expect("inside").to_path_buf(), bytes);
            }
        }
    }
    files
}

/// Runs `trainer args` in `dir`'s terms and checks that it failed cleanly with a message
/// holding every one of `expected`, and that nothing under `dir` changed.
fn refused(dir: &Path, args: &[&str], expected: &[&str]) -> String {
    refused_by(trainer, dir, args, expected)
}

/// The data segment (heap and anonymous mappings) `trainer_limited` allows, KiB: 1 GiB.
const MEMORY_LIMIT_KIB: u64 = 1 << 20;

/// Runs the `trainer` binary on the ndarray backend with `args`, its data segment limited to
/// [`MEMORY_LIMIT_KIB`] (`ulimit -d`), so that an allocation beyond it aborts the process. The
/// backend is fixed because a GPU driver's own mappings (lavapipe's, under `--features wgpu`)
/// also count against the limit.
fn trainer_limited(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -d {MEMORY_LIMIT_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_trainer"))
        .args(["--backend", "ndarray"])
        .args(args)
        .output()
        .expect("running sh")
}

/// [`refused`] with `run` starting the binary.
fn refused_by(run: fn(&[&str]) -> Output, dir: &Path, args: &[&str], expected: &[&str]) -> String {
    let before = snapshot(dir);
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    for text in expected {
        assert!(
            stderr.contains(text),
            "{args:?}: expected `{text}` in {stderr}"
        );
    }
    assert_eq!(
        snapshot(dir).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "{args:?} added or removed files"
    );
    assert!(snapshot(dir) == before, "{args:?} modified a file");
    stderr
}

fn ok(out: &Output) {
    assert!(out.status.success(), "{out:?}");
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

const CAMERA: &str = r#"{"rotation":[1,0,0,0,1,0,0,0,1],"translation":[-2,-2,1],"fx":60,"fy":60,"cx":32,"cy":24,"width":64,"height":48}"#;

/// A binary 3DGS PLY of `n` Gaussians at SH degree 0 whose every value is `value`.
fn uniform_ply(n: usize, value: f32) -> Vec<u8> {
    let names = [
        "x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
        "rot_0", "rot_1", "rot_2", "rot_3",
    ];
    let mut bytes = format!("ply\nformat binary_little_endian 1.0\nelement vertex {n}\n");
    for name in names {
        bytes.push_str(&format!("property float {name}\n"));
    }
    bytes.push_str("end_header\n");
    let mut bytes = bytes.into_bytes();
    for _ in 0..n * names.len() {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    bytes
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    let Some(real) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let dir = folder("overwrite");
    let ply = dir.join("s.ply");
    std::fs::copy(&real, &ply).expect("copy");
    let camera = dir.join("cam.json");
    std::fs::write(&camera, CAMERA).expect("camera");
    // The same file under another name: through `..`, and as a hard link with an image's name.
    std::fs::create_dir_all(dir.join("sub")).expect("sub");
    let dotted = dir.join("sub/../s.ply");
    let linked = dir.join("linked.png");
    std::fs::hard_link(&ply, &linked).expect("hard link");
    for output in [&ply, &dotted] {
        refused(
            &dir,
            &["convert", s(&ply), s(output)],
            &["is the input", "refusing"],
        );
        refused(
            &dir,
            &["transform", s(&ply), s(output), "--scale", "2"],
            &["is the input"],
        );
    }
    refused(
        &dir,
        &[
            "render",
            s(&ply),
            "--camera",
            s(&camera),
            "--out",
            s(&linked),
        ],
        &["--out", "is the input"],
    );
    let json = dir.join("cam.png");
    std::fs::rename(&camera, &json).expect("rename");
    refused(
        &dir,
        &["render", s(&ply), "--camera", s(&json), "--out", s(&json)],
        &["is the input"],
    );
    refused(
        &dir,
        &["bench", "render", "--ply", s(&ply), "--json", s(&ply)],
        &["--json", "is the input"],
    );
    // Training into the dataset's own folder.
    refused(
        &dir,
        &["--data", s(&dir), "--out", s(&dir), "--steps", "1"],
        &["--out", "is the input"],
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn a_failed_write_leaves_no_temporary_file_and_names_the_users_path() {
    let Some(real) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let dir = folder("failed-write");
    let ply = dir.join("s.ply");
    std::fs::copy(&real, &ply).expect("copy");
    let camera = dir.join("cam.json");
    std::fs::write(&camera, CAMERA).expect("camera");
    // Outputs that are folders.
    let as_folder = dir.join("out.splat");
    std::fs::create_dir_all(&as_folder).expect("folder");
    let stderr = refused(&dir, &["convert", s(&ply), s(&as_folder)], &["out.splat"]);
    assert!(!stderr.contains(".tmp"), "{stderr}");
    let png_folder = dir.join("out.png");
    std::fs::create_dir_all(&png_folder).expect("folder");
    let stderr = refused(
        &dir,
        &[
            "render",
            s(&ply),
            "--camera",
            s(&camera),
            "--out",
            s(&png_folder),
        ],
        &["out.png"],
    );
    assert!(!stderr.contains(".tmp"), "{stderr}");
    // An output in a folder that does not exist.
    let nowhere = dir.join("missing/out.ply");
    refused(
        &dir,
        &["convert", s(&ply), s(&nowhere)],
        &["missing/out.ply"],
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn impossible_sizes_are_refused_before_allocating() {
    let Some(real) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let dir = folder("sizes");
    let ply = dir.join("s.ply");
    std::fs::copy(&real, &ply).expect("copy");
    let camera = dir.join("huge.json");
    std::fs::write(
        &camera,
        CAMERA
            .replace("\"width\":64", "\"width\":100000")
            .replace("\"height\":48", "\"height\":100000"),
    )
    .expect("camera");
    let out = dir.join("huge.png");
    refused(
        &dir,
        &["render", s(&ply), "--camera", s(&camera), "--out", s(&out)],
        &["100000x100000 render needs about", "GB available"],
    );
    // Ten billion random Gaussians: more than the machine's memory (2.2 TB).
    let run = dir.join("run");
    refused(
        &dir,
        &[
            "--set",
            "init.random_count=10000000000",
            "--set",
            "densify.max_gaussians=10000000000",
            "--set",
            "init.mode=random",
            "--set",
            "data.procedural.resolution=8",
            "--set",
            "data.procedural.train_views=1",
            "--set",
            "data.procedural.test_views=1",
            "--out",
            s(&run),
        ],
        &["initialising 10000000000 random Gaussians", "needs about"],
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn bad_cameras_transforms_and_values_are_errors() {
    let Some(real) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let dir = folder("values");
    let ply = dir.join("s.ply");
    std::fs::copy(&real, &ply).expect("copy");
    let out = dir.join("out.png");
    for (name, camera, expected) in [
        (
            "zero",
            CAMERA.replace("[1,0,0,0,1,0,0,0,1]", "[0,0,0,0,0,0,0,0,0]"),
            "not orthonormal",
        ),
        (
            "reflection",
            CAMERA.replace("[1,0,0,0,1,0,0,0,1]", "[1,0,0,0,1,0,0,0,-1]"),
            "reflection",
        ),
        (
            "focal",
            CAMERA.replace("\"fx\":60", "\"fx\":-60"),
            "focal lengths must be positive",
        ),
    ] {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, camera).expect("camera");
        refused(
            &dir,
            &["render", s(&ply), "--camera", s(&path), "--out", s(&out)],
            &[&format!("{name}.json"), expected],
        );
    }
    // Transforms whose result f32 cannot hold.
    let moved = dir.join("moved.ply");
    refused(
        &dir,
        &["transform", s(&ply), s(&moved), "--scale", "1e39"],
        &["moved.ply", "non-finite", "not written"],
    );
    refused(
        &dir,
        &["transform", s(&ply), s(&moved), "--translate", "1e39,0,0"],
        &["non-finite"],
    );
    // An image extension that is not PNG or JPEG.
    let camera = dir.join("cam.json");
    std::fs::write(&camera, CAMERA).expect("camera");
    refused(
        &dir,
        &[
            "render",
            s(&ply),
            "--camera",
            s(&camera),
            "--out",
            s(&dir.join("x.bmp")),
        ],
        &["x.bmp", "unknown image extension"],
    );
    // A JPEG is a JPEG.
    let jpeg = dir.join("x.jpg");
    ok(&trainer(&[
        "render",
        s(&ply),
        "--camera",
        s(&camera),
        "--out",
        s(&jpeg),
    ]));
    let bytes = std::fs::read(&jpeg).expect("written");
    assert_eq!(&bytes[..3], &[0xFF, 0xD8, 0xFF], "JPEG magic");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn non_finite_gaussians_are_reported_and_not_rendered() {
    let dir = folder("nan");
    let ply = dir.join("nan.ply");
    std::fs::write(&ply, uniform_ply(3, f32::NAN)).expect("ply");
    let info = trainer(&["info", s(&ply)]);
    ok(&info);
    assert!(
        stdout(&info).contains("3 Gaussians hold NaN or infinite values (the first is index 0)")
            && stdout(&info).contains("no finite centre"),
        "{}",
        stdout(&info)
    );
    let camera = dir.join("cam.json");
    std::fs::write(&camera, CAMERA).expect("camera");
    refused(
        &dir,
        &[
            "render",
            s(&ply),
            "--camera",
            s(&camera),
            "--out",
            s(&dir.join("nan.png")),
        ],
        &["3 of 3 Gaussians hold NaN", "refusing to use them"],
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn corrupt_ply_counts_say_what_is_wrong() {
    let dir = folder("counts");
    let good = uniform_ply(2, 0.5);
    let text = String::from_utf8_lossy(&good).into_owned();
    for (count, expected) in [
        ("-5", "count `-5`, which is not a whole number"),
        ("1e23", "count `1e23`, which is not a whole number"),
        (
            "1000000000000",
            "declares 1000000000000 `vertex` entries but only",
        ),
    ] {
        let path = dir.join(format!("count{count}.ply"));
        let header_end = text.find("end_header").expect("header");
        let mut bytes = text[..header_end]
            .replace("element vertex 2", &format!("element vertex {count}"))
            .into_bytes();
        bytes.extend_from_slice(&good[header_end..]);
        std::fs::write(&path, bytes).expect("ply");
        refused(&dir, &["info", s(&path)], &[expected]);
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn a_failed_resume_writes_nothing_and_no_held_out_views_is_said() {
    let dir = folder("resume");
    let garbage = dir.join("garbage.safetensors");
    std::fs::write(&garbage, b"not a checkpoint").expect("file");
    let run = dir.join("run");
    refused(
        &dir,
        &["--resume", s(&garbage), "--out", s(&run), "--steps", "2"],
        &["garbage.safetensors", "not a safetensors file"],
    );
    assert!(!run.exists(), "a failed resume created {}", run.display());

    // No held-out views: the run says there is nothing to evaluate and writes no score.
    let out = trainer(&[
        "--steps",
        "3",
        "--set",
        "data.procedural.test_views=0",
        "--set",
        "data.procedural.resolution=16",
        "--set",
        "data.procedural.train_views=2",
        "--out",
        s(&run),
    ]);
    ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains("no held-out views: nothing to evaluate")
            && text.contains("no held-out views to evaluate")
            && !text.contains("PSNR -0"),
        "{text}"
    );
    let eval_csv = std::fs::read_to_string(run.join("eval.csv")).expect("eval.csv");
    assert_eq!(eval_csv.lines().count(), 1, "only the header: {eval_csv}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A long procedural training run into `run` (every step logged, no evaluation), its output
/// captured, returned once `train.csv` holds `rows` lines (or after two minutes).
fn training_until_rows(run: &Path, rows: usize) -> std::process::Child {
    let child = crate::common::trainer_command()
        .args([
            "--steps",
            "1000000",
            "--set",
            "eval.every=0",
            "--set",
            "output.log_every=1",
            "--set",
            "data.procedural.resolution=16",
            "--out",
            s(run),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("trainer starts");
    let logged = || {
        std::fs::read_to_string(run.join("train.csv"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let started = std::time::Instant::now();
    while logged() < rows && started.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

#[test]
fn a_killed_run_keeps_its_logs_to_the_last_logged_step() {
    let dir = folder("killed");
    let run = dir.join("run");
    let mut child = training_until_rows(&run, 6);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    // The header and at least five steps, and every row whole.
    let csv = std::fs::read_to_string(run.join("train.csv")).expect("train.csv");
    assert!(csv.lines().count() >= 6, "{csv}");
    assert!(csv.starts_with("step,loss"), "{csv}");
    let jsonl = std::fs::read_to_string(run.join("metrics.jsonl")).expect("metrics.jsonl");
    let whole: Vec<&str> = jsonl.lines().collect();
    assert!(whole.len() >= 5, "{jsonl}");
    for (i, line) in whole.iter().enumerate() {
        // The last row may be cut by the kill; every earlier one is whole.
        if i + 1 < whole.len() {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON row");
            assert_eq!(value["step"].as_u64(), Some(i as u64 + 1), "{line}");
        }
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn ctrl_c_finishes_the_step_writes_a_checkpoint_and_exits_130() {
    let dir = folder("interrupt");
    let run = dir.join("run");
    let child = training_until_rows(&run, 4);
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let out = child.wait_with_output().expect("trainer exits");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        text.contains("interrupted after step") && text.contains("--resume"),
        "{text}"
    );
    assert!(run.join("checkpoint.safetensors").is_file());
    // The step it stopped at is the last row of the logs.
    let step: usize = text
        .split("interrupted after step ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .expect("the step");
    let csv = std::fs::read_to_string(run.join("train.csv")).expect("train.csv");
    let last = csv.lines().last().expect("a row");
    assert!(
        last.starts_with(&format!("{step},")),
        "{last} vs step {step}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn a_configs_data_path_is_relative_to_the_config_file() {
    let dir = folder("relative");
    let config = dir.join("sub/preset.toml");
    std::fs::create_dir_all(dir.join("sub")).expect("folder");
    std::fs::write(&config, "steps = 1\n[data]\npath = \"scene\"\n").expect("config");
    let stderr = refused(
        &dir,
        &["--config", s(&config), "--out", s(&dir.join("run"))],
        &["sub/scene", "does not exist", "--data PATH"],
    );
    assert!(stderr.contains("relative to its folder"), "{stderr}");
    // A shipped preset from another working directory.
    let Some(_) = data_path("lego_400") else {
        return;
    };
    let preset = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/lego-100-smoke.toml"
    );
    let out = crate::common::trainer_command()
        .current_dir(&dir)
        .args([
            "--config",
            preset,
            "--steps",
            "1",
            "--set",
            "eval.max_views=1",
        ])
        .args(["--out", s(&dir.join("run"))])
        .output()
        .expect("trainer runs");
    ok(&out);
    assert!(
        stdout(&out).contains("lego_400: 100 training views"),
        "{}",
        stdout(&out)
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A COLMAP binary model of one 4x4 PINHOLE camera (`cameras.bin`).
fn one_camera_bin() -> Vec<u8> {
    let mut bytes = 1u64.to_le_bytes().to_vec();
    bytes.extend(1u32.to_le_bytes());
    bytes.extend(1i32.to_le_bytes());
    bytes.extend(4u64.to_le_bytes());
    bytes.extend(4u64.to_le_bytes());
    for param in [4.0f64, 4.0, 2.0, 2.0] {
        bytes.extend(param.to_le_bytes());
    }
    bytes
}

/// The 16-byte header of an SPZ v2 file of `count` points at SH degree 0.
fn spz_header(count: u32) -> Vec<u8> {
    let mut bytes = 0x5053_474e_u32.to_le_bytes().to_vec();
    bytes.extend(2u32.to_le_bytes());
    bytes.extend(count.to_le_bytes());
    bytes.extend([0, 12, 0, 0]);
    bytes
}

/// A COLMAP binary file of no records.
fn no_records() -> Vec<u8> {
    0u64.to_le_bytes().to_vec()
}

/// A small file (a count, then 92 zero bytes) that announces `count` records.
fn announcing(count: u64) -> Vec<u8> {
    let mut bytes = count.to_le_bytes().to_vec();
    bytes.resize(100, 0);
    bytes
}

/// A safetensors file whose one tensor claims `[rows, 3]` f32 values over 12 bytes of data.
fn safetensors_claiming(rows: u64) -> Vec<u8> {
    let header = format!(
        r#"{{"__metadata__":{{"format":"ember-train checkpoint v1"}},"param.means":{{"dtype":"F32","shape":[{rows},3],"data_offsets":[0,12]}}}}"#
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend([0u8; 12]);
    bytes
}

#[test]
fn huge_counts_in_small_files_fail_fast_under_a_memory_limit() {
    use std::io::Write;
    const HUGE: u64 = 1_000_000_000_000;
    let Some(real) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let dir = folder("huge-counts");
    let ply = dir.join("s.ply");
    std::fs::copy(&real, &ply).expect("copy");

    // The limit is in force: a render whose buffers need about 4 GB aborts under it (or, on
    // a machine with less memory free than that, is refused by the estimate).
    let camera = dir.join("big.json");
    std::fs::write(&camera, CAMERA.replace("64", "9000").replace("48", "9000")).expect("camera");
    let control = trainer_limited(&[
        "render",
        s(&ply),
        "--camera",
        s(&camera),
        "--out",
        s(&dir.join("big.png")),
    ]);
    let said = String::from_utf8_lossy(&control.stderr);
    assert!(
        said.contains("memory allocation of") || said.contains("needs about"),
        "the memory limit did not stop a 4 GB render: {control:?}"
    );
    std::fs::remove_file(&camera).expect("clean up");
    let _ = std::fs::remove_file(dir.join("big.png"));

    // Splat files: every count the header gives is checked against the bytes that follow.
    let text = String::from_utf8(uniform_ply(0, 0.0)).expect("ascii header");
    let huge_ply = dir.join("huge.ply");
    let mut bytes = text
        .replace("element vertex 0", &format!("element vertex {HUGE}"))
        .into_bytes();
    bytes.resize(bytes.len() + 100, 0);
    std::fs::write(&huge_ply, bytes).expect("ply");
    let compressed = dir.join("huge.compressed.ply");
    let mut bytes = format!(
        "ply\nformat binary_little_endian 1.0\nelement chunk {HUGE}\nproperty float min_x\n\
         element vertex {HUGE}\nproperty uint packed_position\nend_header\n"
    )
    .into_bytes();
    bytes.resize(bytes.len() + 100, 0);
    std::fs::write(&compressed, bytes).expect("compressed ply");
    // SPZ counts are u32: the largest one, raw and gzipped.
    let mut header = spz_header(u32::MAX);
    header.resize(100, 0);
    let raw_spz = dir.join("huge-raw.spz");
    std::fs::write(&raw_spz, &header).expect("spz");
    let gzip_spz = dir.join("huge.spz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&header).expect("gzip");
    std::fs::write(&gzip_spz, encoder.finish().expect("gzip")).expect("spz");
    for (file, expected) in [
        (
            &huge_ply,
            "declares 1000000000000 `vertex` entries but only",
        ),
        (&compressed, "1000000000000"),
        (&raw_spz, "huge-raw.spz"),
        (&gzip_spz, "compressed bytes can hold"),
    ] {
        refused_by(trainer_limited, &dir, &["info", s(file)], &[expected]);
    }

    // COLMAP binary models: each of the three files announcing 10^12 records.
    let scene = dir.join("scene");
    let model = scene.join("sparse/0");
    std::fs::create_dir_all(&model).expect("model folder");
    std::fs::create_dir_all(scene.join("images")).expect("images folder");
    let run = dir.join("run");
    for (file, contents) in [
        (
            "cameras.bin",
            [announcing(HUGE), no_records(), no_records()],
        ),
        (
            "images.bin",
            [one_camera_bin(), announcing(HUGE), no_records()],
        ),
        (
            "points3D.bin",
            [one_camera_bin(), no_records(), announcing(HUGE)],
        ),
    ] {
        for (name, bytes) in ["cameras.bin", "images.bin", "points3D.bin"]
            .iter()
            .zip(contents)
        {
            std::fs::write(model.join(name), bytes).expect("model file");
        }
        refused_by(
            trainer_limited,
            &dir,
            &["--data", s(&scene), "--steps", "1", "--out", s(&run)],
            &[file, "announces 1000000000000 records"],
        );
    }

    // A checkpoint whose tensor claims 10^12 rows over 12 bytes.
    let checkpoint = dir.join("huge.safetensors");
    std::fs::write(&checkpoint, safetensors_claiming(HUGE)).expect("checkpoint");
    refused_by(
        trainer_limited,
        &dir,
        &["--resume", s(&checkpoint), "--steps", "1", "--out", s(&run)],
        &["huge.safetensors", "not a safetensors file"],
    );
    assert!(!run.exists(), "a refused run created {}", run.display());
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn the_first_line_names_the_config_and_print_config_shows_unset_keys() {
    let dir = folder("config-origin");
    let printed = trainer(&["--print-config"]);
    ok(&printed);
    let text = stdout(&printed);
    assert!(
        text.starts_with("# the built-in preset configs/quick.toml"),
        "{text}"
    );
    assert!(text.contains("steps = 1500"), "{text}");
    for unset in [
        "# path = \"path/to/scene\"  # unset: train on the built-in procedural scene",
        "# max_images = 100  # unset: every view",
        "# point_cloud = ",
        "# lr_means_steps = 30000  # unset: the run's `steps`",
        "# max_views = 8  # unset: every held-out view",
    ] {
        assert!(text.contains(unset), "`{unset}` missing from\n{text}");
    }
    // An empty file starts from the library defaults, and says which file it is.
    let empty = dir.join("empty.toml");
    std::fs::write(&empty, "").expect("config");
    let printed = trainer(&["--config", s(&empty), "--print-config", "--set", "seed=3"]);
    ok(&printed);
    let text = stdout(&printed);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.contains("empty.toml") && first.contains("--set seed=3"),
        "{first}"
    );
    assert!(
        text.contains("steps = 30000") && text.contains("seed = 3"),
        "{text}"
    );
    // A run's first line names its config.
    let run = trainer(&["--steps", "1", "--out", s(&dir.join("run"))]);
    ok(&run);
    let text = stdout(&run);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("config: the built-in preset configs/quick.toml")
            && first.contains("30000 steps")
            && first.contains("--steps 1"),
        "{first}"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}
