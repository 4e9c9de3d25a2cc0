//! `trainer render IN --path PATH.json --out DIR`: every frame of a camera path as a PNG and
//! all of them as an animated PNG, on a small splat file made here.

use std::path::{Path, PathBuf};

use ember_data::{Splats, write_splats};
use ember_kernels::CameraParams;

use crate::common::{fresh_folder, stdout, trainer};

/// A fresh scratch folder for one test.
fn folder(name: &str) -> PathBuf {
    fresh_folder(&format!("render-path-{name}"))
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("readable folder")
        .map(|entry| {
            entry
                .expect("folder entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// Five coloured Gaussians around the origin, written as a 3DGS PLY at `path`.
fn write_scene(path: &Path) {
    let means = vec![
        [0.0, 0.0, 0.0],
        [0.8, 0.3, 0.2],
        [-0.7, -0.4, 0.5],
        [0.2, -0.8, -0.3],
        [-0.3, 0.7, 0.9],
    ];
    let n = means.len();
    let splats = Splats {
        means,
        quats: vec![[1.0, 0.0, 0.0, 0.0]; n],
        log_scales: vec![[-1.2, -1.5, -1.0]; n],
        opacity_logits: vec![2.0; n],
        sh_dc: vec![
            [1.5, -1.0, -1.0],
            [-1.0, 1.5, -1.0],
            [-1.0, -1.0, 1.5],
            [1.0, 1.0, -1.5],
            [0.5, 0.5, 0.5],
        ],
        sh_rest: Vec::new(),
        sh_degree: 0,
    };
    write_splats(path, &splats).expect("the scene");
}

/// A 64x48 camera at `center`, turned by `angle` radians about the world y axis.
fn camera(angle: f64, center: [f64; 3]) -> CameraParams {
    let (sin, cos) = angle.sin_cos();
    CameraParams {
        rotation: [cos, 0.0, sin, 0.0, 1.0, 0.0, -sin, 0.0, cos],
        translation: [0.0; 3],
        fx: 60.0,
        fy: 60.0,
        cx: 32.0,
        cy: 24.0,
        width: 64,
        height: 48,
    }
    .with_center(center)
}

/// Three keyframes over 0.5 s, moving right and turning back to the scene.
fn keyframes() -> [(f64, CameraParams); 3] {
    [
        (0.0, camera(0.0, [0.0, 0.0, -4.0])),
        (0.25, camera(0.1, [0.5, 0.2, -3.8])),
        (0.5, camera(0.25, [1.0, 0.0, -3.5])),
    ]
}

fn path_json(fps: f64, keys: &[(f64, CameraParams)]) -> String {
    let keyframes: Vec<serde_json::Value> = keys
        .iter()
        .map(|(time, camera)| serde_json::json!({"time": time, "camera": camera}))
        .collect();
    serde_json::json!({"fps": fps, "keyframes": keyframes}).to_string()
}

/// A PNG's width, height and 8-bit RGB pixels.
fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::fs::File::open(path).expect("the PNG");
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .expect("a PNG header");
    let mut pixels = vec![0; reader.output_buffer_size().expect("a frame size")];
    let frame = reader.next_frame(&mut pixels).expect("the image");
    assert_eq!(frame.color_type, png::ColorType::Rgb);
    pixels.truncate(frame.buffer_size());
    (frame.width, frame.height, pixels)
}

#[test]
fn render_path_writes_every_frame_and_an_animated_png() {
    let dir = folder("frames");
    let scene = dir.join("scene.ply");
    write_scene(&scene);
    let keys = keyframes();
    let path = dir.join("path.json");
    std::fs::write(&path, path_json(10.0, &keys)).expect("the path");
    let out = dir.join("frames");
    let rendered = trainer(&["render", s(&scene), "--path", s(&path), "--out", s(&out)]);
    assert!(rendered.status.success(), "{rendered:?}");
    assert!(
        stdout(&rendered).contains("6 frames of 64x48 at 10 fps"),
        "{}",
        stdout(&rendered)
    );

    // 0.5 s at 10 fps: frames at 0.0, 0.1, ..., 0.5.
    let expected: Vec<String> = (0..6)
        .map(|i| format!("frame_{i:05}.png"))
        .chain(["path.apng".to_string()])
        .collect();
    assert_eq!(names(&out), expected);
    let frames: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            let (width, height, pixels) = decode_png(&out.join(format!("frame_{i:05}.png")));
            assert_eq!((width, height), (64, 48));
            pixels
        })
        .collect();
    assert!(
        frames[0].iter().any(|&v| v > 0),
        "the scene is in view of the first keyframe"
    );
    assert_ne!(frames[0], frames[5], "the camera moves");

    // Frame 0 is keyframe 0's camera: the same pixels as `--camera` renders.
    let first = dir.join("first.json");
    std::fs::write(
        &first,
        serde_json::to_string(&keys[0].1).expect("camera JSON"),
    )
    .expect("the camera");
    let single = dir.join("single.png");
    let rendered = trainer(&[
        "render",
        s(&scene),
        "--camera",
        s(&first),
        "--out",
        s(&single),
    ]);
    assert!(rendered.status.success(), "{rendered:?}");
    assert_eq!(decode_png(&single).2, frames[0]);

    // The animated PNG: 6 frames of 1/10 s, looping, the same pixels as the PNGs.
    let file = std::fs::File::open(out.join("path.apng")).expect("the animation");
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .expect("an APNG header");
    let control = *reader.info().animation_control().expect("an acTL chunk");
    assert_eq!((control.num_frames, control.num_plays), (6, 0));
    let mut pixels = vec![0; reader.output_buffer_size().expect("a frame size")];
    for (i, expected) in frames.iter().enumerate() {
        let frame = reader.next_frame(&mut pixels).expect("a frame");
        assert_eq!((frame.width, frame.height), (64, 48));
        let delay = reader.info().frame_control().expect("an fcTL chunk");
        assert_eq!((delay.delay_num, delay.delay_den), (1, 10));
        assert_eq!(
            &pixels[..frame.buffer_size()],
            expected.as_slice(),
            "frame {i}"
        );
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A path saved by the viewer says how the page drew: its background and SH degree are used
/// (`--background` wins over the file's), and its level of detail draws through a hierarchy.
#[test]
fn render_path_draws_as_the_paths_render_settings_say() {
    let dir = folder("settings");
    let scene = dir.join("scene.ply");
    write_scene(&scene);
    let keys = keyframes();
    let mut json: serde_json::Value =
        serde_json::from_str(&path_json(10.0, &keys[..1])).expect("JSON");
    let frame = |json: &serde_json::Value, extra: &[&str], name: &str| {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, json.to_string()).expect("the path");
        let out = dir.join(name);
        let mut args = vec!["render", s(&scene), "--path", s(&path), "--out", s(&out)];
        args.extend(extra);
        let rendered = trainer(&args);
        assert!(rendered.status.success(), "{rendered:?}");
        decode_png(&out.join("frame_00000.png")).2
    };
    let plain = frame(&json, &[], "plain");
    assert_eq!(&plain[..3], &[0, 0, 0], "black without settings");
    json["render"] = serde_json::json!({"background": [1, 1, 1]});
    let white = frame(&json, &[], "white");
    assert_eq!(&white[..3], &[255, 255, 255], "the path's background");
    let grey = frame(&json, &["--background", "0.5,0.5,0.5"], "grey");
    assert_eq!(&grey[..3], &[128, 128, 128], "--background wins");
    json["render"] = serde_json::json!({"sh_degree": 0, "lod_threshold": 64});
    let coarse = frame(&json, &[], "coarse");
    assert_ne!(coarse, plain, "a 64 px threshold merges the five Gaussians");
    json["render"] = serde_json::json!({"lod_threshold": 0});
    assert_eq!(frame(&json, &[], "leaves"), plain, "0 draws every Gaussian");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn render_path_refuses_bad_paths_and_outputs_and_writes_nothing() {
    let dir = folder("refused");
    let scene = dir.join("scene.ply");
    write_scene(&scene);
    let keys = keyframes();
    let good = dir.join("good.json");
    std::fs::write(&good, path_json(10.0, &keys)).expect("the path");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, path_json(10.0, &[keys[0], keys[2], keys[1]])).expect("the path");
    let other_file = dir.join("notes.txt");
    std::fs::write(&other_file, "not a folder").expect("a file");
    let out = dir.join("frames");
    let before = names(&dir);
    let inputs = |path: &Path| std::fs::read(path).expect("an input");
    let (scene_bytes, good_bytes) = (inputs(&scene), inputs(&good));

    // Exit 1 for a refusal, 2 for a command line clap rejects.
    let refused = |args: &[&str], code: i32, expected: &[&str]| {
        let run = trainer(args);
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert_eq!(run.status.code(), Some(code), "{args:?}: {run:?}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        for text in expected {
            assert!(
                stderr.contains(text),
                "{args:?}: expected `{text}` in {stderr}"
            );
        }
        assert_eq!(names(&dir), before, "{args:?} added or removed files");
    };
    refused(
        &["render", s(&scene), "--path", s(&bad), "--out", s(&out)],
        1,
        &[
            "bad.json",
            "keyframes[2].time",
            "not after keyframes[1].time",
        ],
    );
    refused(
        &["render", s(&scene), "--path", s(&good), "--out", s(&scene)],
        1,
        &["--out", "is the input", "scene.ply"],
    );
    refused(
        &["render", s(&scene), "--path", s(&good), "--out", s(&good)],
        1,
        &["--out", "is the input", "good.json"],
    );
    refused(
        &[
            "render",
            s(&scene),
            "--path",
            s(&good),
            "--out",
            s(&other_file),
        ],
        1,
        &["notes.txt is a file"],
    );
    refused(
        &[
            "render",
            s(&scene),
            "--path",
            s(&good),
            "--camera",
            s(&good),
            "--out",
            s(&out),
        ],
        2,
        &["cannot be used with"],
    );
    refused(&["render", s(&scene), "--path", s(&good)], 2, &["--out"]);
    assert!(inputs(&scene) == scene_bytes && inputs(&good) == good_bytes);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn render_path_removes_its_partial_animation_when_a_frame_cannot_be_written() {
    let dir = folder("partial");
    let scene = dir.join("scene.ply");
    write_scene(&scene);
    let path = dir.join("path.json");
    std::fs::write(&path, path_json(10.0, &keyframes())).expect("the path");
    let out = dir.join("frames");
    // A folder where frame 2 goes: its write fails after frames 0 and 1.
    std::fs::create_dir_all(out.join("frame_00002.png")).expect("a folder in the way");
    let run = trainer(&["render", s(&scene), "--path", s(&path), "--out", s(&out)]);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(stderr.contains("frame_00002.png"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        names(&out),
        ["frame_00000.png", "frame_00001.png", "frame_00002.png"],
        "no path.apng, no .tmp"
    );
    std::fs::remove_dir_all(&dir).expect("clean up");
}
