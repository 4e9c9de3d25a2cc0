//! The hierarchy: moments preserved by every merge, a valid tree of at most twice the leaves,
//! monotone bounds, and the file (a plain 3DGS PLY of the leaves, read back exactly, a corrupt
//! tree refused).

use std::path::Path;

use super::*;
use crate::splats::sh_rest_coefficients;

/// `n` Gaussians in a slab, degree-`degree` SH, deterministic.
fn splats(n: usize, degree: usize) -> Splats {
    let k = sh_rest_coefficients(degree);
    let f = |i: usize, salt: f32| ((i as f32 + 0.5) * (0.618_034 + salt)).fract();
    Splats {
        means: (0..n)
            .map(|i| {
                [
                    4.0 * f(i, 0.1) - 2.0,
                    2.0 * f(i, 0.2) - 1.0,
                    0.3 * f(i, 0.3),
                ]
            })
            .collect(),
        quats: (0..n)
            .map(|i| [1.0 + f(i, 0.4), f(i, 0.5) - 0.5, f(i, 0.6), 0.2 - f(i, 0.7)])
            .collect(),
        log_scales: (0..n)
            .map(|i| [-4.0 + f(i, 0.8), -4.5 + f(i, 0.9), -6.0 + f(i, 1.0)])
            .collect(),
        opacity_logits: (0..n).map(|i| 6.0 * f(i, 1.1) - 3.0).collect(),
        sh_dc: (0..n)
            .map(|i| [f(i, 1.2), -f(i, 1.3), f(i, 1.4) - 0.5])
            .collect(),
        sh_rest: (0..n * k * 3).map(|j| 0.2 * f(j, 1.5) - 0.1).collect(),
        sh_degree: degree,
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Mass, mean and covariance (`xx xy xz yy yz zz`) of Gaussian `i` as stored.
fn stored(s: &Splats, i: usize) -> (f64, [f64; 3], [f64; 6]) {
    let q = s.quats[i].map(f64::from);
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let r = ember_kernels::quat::rotation_matrix(q.map(|v| v / n));
    let sc = s.log_scales[i].map(|v| f64::from(v).exp());
    let e = |a: usize, b: usize| -> f64 {
        (0..3)
            .map(|k| r[3 * a + k] * r[3 * b + k] * sc[k] * sc[k])
            .sum()
    };
    let area = sc[0] * sc[1] + sc[0] * sc[2] + sc[1] * sc[2];
    (
        sigmoid(f64::from(s.opacity_logits[i])) * area,
        s.means[i].map(f64::from),
        [e(0, 0), e(0, 1), e(0, 2), e(1, 1), e(1, 2), e(2, 2)],
    )
}

fn leaves_below(h: &SplatHierarchy, node: usize) -> Vec<usize> {
    (0..h.leaves)
        .filter(|&leaf| {
            let mut n = leaf;
            while n != node && n + 1 != h.len() {
                n = h.parents[n] as usize;
            }
            n == node
        })
        .collect()
}

#[test]
fn merges_preserve_the_leaves_moments_and_colour() {
    let s = splats(700, 2);
    let h = build_hierarchy(&s, &HierarchyConfig::default(), Path::new("t")).unwrap();
    assert_eq!(h.problem(), None);
    assert!(
        h.len() <= 2 * h.leaves,
        "{} nodes for {} leaves",
        h.len(),
        h.leaves
    );
    assert_eq!(h.leaf_splats(), s);
    let k3 = 3 * sh_rest_coefficients(2);
    let mut unclamped = 0;
    for node in (h.leaves..h.len()).step_by(7) {
        let below = leaves_below(&h, node);
        assert!(below.len() >= 2, "node {node}");
        let leaf: Vec<_> = below.iter().map(|&i| stored(&s, i)).collect();
        let mass: f64 = leaf.iter().map(|l| l.0).sum();
        let mean: [f64; 3] =
            std::array::from_fn(|k| leaf.iter().map(|l| l.0 * l.1[k]).sum::<f64>() / mass);
        let pairs = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];
        let cov: [f64; 6] = std::array::from_fn(|e| {
            let (a, b) = pairs[e];
            leaf.iter()
                .map(|l| l.0 * (l.2[e] + (l.1[a] - mean[a]) * (l.1[b] - mean[b])))
                .sum::<f64>()
                / mass
        });
        let (node_mass, node_mean, node_cov) = stored(&h.nodes, node);
        let scale = cov[0].max(cov[3]).max(cov[5]);
        for k in 0..3 {
            assert!(
                (node_mean[k] - mean[k]).abs() < 1e-5,
                "node {node} mean {node_mean:?} {mean:?}"
            );
        }
        for e in 0..6 {
            assert!(
                (node_cov[e] - cov[e]).abs() < 1e-4 * scale,
                "node {node} covariance {node_cov:?} against {cov:?}"
            );
        }
        let opacity = sigmoid(f64::from(h.nodes.opacity_logits[node]));
        if opacity < 0.999 {
            unclamped += 1;
            assert!(
                (node_mass - mass).abs() < 1e-3 * mass,
                "node {node} mass {node_mass} {mass}"
            );
        }
        for c in 0..3 {
            let dc = leaf
                .iter()
                .zip(&below)
                .map(|(l, &i)| l.0 * f64::from(s.sh_dc[i][c]))
                .sum::<f64>()
                / mass;
            assert!(
                (f64::from(h.nodes.sh_dc[node][c]) - dc).abs() < 1e-5,
                "node {node} dc"
            );
        }
        let j = k3 - 1;
        let rest = leaf
            .iter()
            .zip(&below)
            .map(|(l, &i)| l.0 * f64::from(s.sh_rest[i * k3 + j]))
            .sum::<f64>()
            / mass;
        assert!((f64::from(h.nodes.sh_rest[node * k3 + j]) - rest).abs() < 1e-5);
    }
    assert!(
        unclamped > 10,
        "only {unclamped} nodes below the opacity clamp"
    );
}

#[test]
fn bounds_are_monotone_up_the_tree() {
    let s = splats(2_000, 0);
    for branching in [2, 4, 8] {
        let h = build_hierarchy(&s, &HierarchyConfig { branching }, Path::new("t")).unwrap();
        assert_eq!(h.problem(), None, "branching {branching}");
        let g = h.geometry();
        for n in 0..h.len() - 1 {
            let p = h.parents[n] as usize;
            let d = (0..3)
                .map(|k| (f64::from(g.centres[n][k]) - f64::from(g.centres[p][k])).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(
                f64::from(g.radii[p]) >= d + f64::from(g.radii[n]),
                "node {n}"
            );
            assert!(g.sizes[p] >= g.sizes[n], "node {n}");
        }
    }
}

#[test]
fn small_and_bad_inputs() {
    let one = splats(1, 0);
    let h = build_hierarchy(&one, &HierarchyConfig::default(), Path::new("t")).unwrap();
    assert_eq!((h.len(), h.leaves, h.parents.clone()), (1, 1, vec![0]));
    let none = build_hierarchy(
        &Splats::default(),
        &HierarchyConfig::default(),
        Path::new("t"),
    )
    .unwrap();
    assert!(none.is_empty());
    let mut bad = splats(5, 0);
    bad.means[3][1] = f32::NAN;
    let err = build_hierarchy(&bad, &HierarchyConfig::default(), Path::new("bad.ply")).unwrap_err();
    assert!(
        err.to_string().contains("bad.ply") && err.to_string().contains("first is 3"),
        "{err}"
    );
    let err = build_hierarchy(&one, &HierarchyConfig { branching: 1 }, Path::new("t")).unwrap_err();
    assert!(err.to_string().contains("at least 2"), "{err}");
}

#[test]
fn the_file_is_a_plain_ply_of_the_leaves_and_reads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let s = splats(300, 3);
    let h = build_hierarchy(&s, &HierarchyConfig::default(), Path::new("t")).unwrap();
    let path = dir.path().join("scene.lod.ply");
    write_hierarchy(&path, &h).unwrap();
    assert!(is_hierarchy(&path));
    assert_eq!(read_hierarchy(&path).unwrap(), h);
    assert_eq!(crate::read_splats(&path).unwrap(), s);
    let plain = dir.path().join("plain.ply");
    crate::write_splats(&plain, &s).unwrap();
    assert!(!is_hierarchy(&plain));
    let err = read_hierarchy(&plain).unwrap_err().to_string();
    assert!(
        err.contains("plain.ply") && err.contains("trainer lod build"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .all(|e| { !e.unwrap().file_name().to_string_lossy().ends_with(".tmp") })
    );
}

#[test]
fn a_corrupt_tree_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = splats(40, 0);
    let mut h = build_hierarchy(&s, &HierarchyConfig::default(), Path::new("t")).unwrap();
    h.parents[5] = 2;
    let path = dir.path().join("bad.lod.ply");
    let err = write_hierarchy(&path, &h).unwrap_err().to_string();
    assert!(err.contains("node 5 has parent 2"), "{err}");
    assert!(!path.exists());
    // Written by hand past the check: the reader refuses it too.
    let good = build_hierarchy(&s, &HierarchyConfig::default(), Path::new("t")).unwrap();
    write_hierarchy(&path, &good).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 4 * (good.len() - 5);
    bytes[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = read_hierarchy(&path).unwrap_err().to_string();
    assert!(
        err.contains("bad.lod.ply") && err.contains("node 5 has parent 2"),
        "{err}"
    );
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&path, &bytes).unwrap();
    assert!(read_hierarchy(&path).is_err());
}
