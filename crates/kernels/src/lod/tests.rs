//! The cut's weights (`ember_kernels::lod_weights`): the rayon pass against the tensor-op
//! reference, the weights of every root-to-leaf path summing to one at any threshold and camera,
//! the threshold 0 drawing the leaves alone and the refusals (every compiled GPU backend against
//! ndarray: `gpu_tests.rs`).

use crate::lod::cpu;
use crate::lod::{lod_gather_tensor_ops, lod_weights_tensor_ops};
use crate::{LodError, LodInputs, LodNodes, LodOps, LodView, lod_weights};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use ember_test_utils::{fresh_rng, uniform};
use rand::RngExt;

use crate::backend::Cpu;

/// A random hierarchy of `leaves` leaves: groups of 2 to 4 consecutive nodes of a level merge
/// into a parent at their mean, whose sphere holds the children's and whose size is at least
/// theirs (the invariants the weights rely on). Returns `(centres, radii, sizes, parents)`.
pub(super) fn hierarchy(label: &str, leaves: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<i64>) {
    let mut rng = fresh_rng(label);
    let mut centres: Vec<f32> = uniform(&mut rng, 3 * leaves, -3.0, 3.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let mut radii = vec![0.0f32; leaves];
    let mut sizes: Vec<f32> = uniform(&mut rng, leaves, 0.001, 0.05)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let mut parents: Vec<i64> = vec![-1; leaves];
    let mut level: Vec<usize> = (0..leaves).collect();
    while level.len() > 1 {
        let mut next = Vec::new();
        let mut at = 0;
        while at < level.len() {
            let take = rng.random_range(2..=4).min(level.len() - at);
            let group = &level[at..at + take];
            at += take;
            if group.len() == 1 {
                next.push(group[0]);
                continue;
            }
            let node = radii.len();
            let c: [f32; 3] = std::array::from_fn(|k| {
                group.iter().map(|&g| centres[3 * g + k]).sum::<f32>() / group.len() as f32
            });
            let mut radius = 0.0f32;
            let mut size = 0.0f32;
            for &g in group {
                let d = (0..3)
                    .map(|k| (centres[3 * g + k] - c[k]).powi(2))
                    .sum::<f32>()
                    .sqrt();
                radius = radius.max((d + radii[g]) * 1.0001);
                size = size.max(sizes[g]);
                parents[g] = node as i64;
            }
            centres.extend(c);
            radii.push(radius);
            sizes.push(size * rng.random_range(1.0..2.0));
            parents.push(-1);
            next.push(node);
        }
        level = next;
    }
    let root = radii.len() - 1;
    parents[root] = root as i64;
    (centres, radii, sizes, parents)
}

pub(super) fn weights<B: LodOps>(h: &(Vec<f32>, Vec<f32>, Vec<f32>, Vec<i64>), leaves: usize, view: &LodView) -> Vec<f32> {
    let device = Default::default();
    let m = h.1.len();
    let out = lod_weights(
        Tensor::<B, 2>::from_data(TensorData::new(h.0.clone(), [m, 3]), &device),
        Tensor::<B, 1>::from_data(TensorData::new(h.1.clone(), [m]), &device),
        Tensor::<B, 1>::from_data(TensorData::new(h.2.clone(), [m]), &device),
        Tensor::<B, 1, Int>::from_data(TensorData::new(h.3.clone(), [m]), &device),
        leaves,
        view,
    )
    .unwrap();
    out.into_data().convert::<f32>().into_vec::<f32>().unwrap()
}

/// The tensor-op reference on `B`.
fn reference<B: Backend>(h: &(Vec<f32>, Vec<f32>, Vec<f32>, Vec<i64>), leaves: usize, view: &LodView) -> Vec<f32> {
    let device = Default::default();
    let m = h.1.len();
    let float = |t: Tensor<B, 1>| t.into_primitive().tensor();
    let out = lod_weights_tensor_ops::<B>(
        LodInputs {
            centres: Tensor::<B, 2>::from_data(TensorData::new(h.0.clone(), [m, 3]), &device)
                .into_primitive()
                .tensor(),
            radii: float(Tensor::from_data(TensorData::new(h.1.clone(), [m]), &device)),
            sizes: float(Tensor::from_data(TensorData::new(h.2.clone(), [m]), &device)),
            parents: Tensor::<B, 1, Int>::from_data(TensorData::new(h.3.clone(), [m]), &device)
                .into_primitive(),
            leaves,
        },
        view,
    );
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(out))
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .unwrap()
}

pub(super) fn views() -> Vec<LodView> {
    let mut out = Vec::new();
    for distance in [0.5, 4.0, 15.0, 60.0, 400.0] {
        for threshold in [0.0, 0.5, 1.0, 3.0] {
            out.push(LodView {
                eye: [distance, 0.3 * distance, -0.2 * distance],
                focal: 600.0,
                threshold,
            });
        }
    }
    out
}

pub(super) fn close(label: &str, got: &[f32], want: &[f32]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 2e-5, "{label}: node {i}: {g} against {w}");
    }
}

#[test]
fn rayon_pass_matches_the_tensor_ops() {
    let leaves = 5_000;
    let h = hierarchy("lod_rayon", leaves);
    for view in views() {
        let got = weights::<Cpu>(&h, leaves, &view);
        let want = reference::<Cpu>(&h, leaves, &view);
        close(&format!("{view:?}"), &got, &want);
        let direct = cpu::lod_weights(&h.0, &h.1, &h.2, &h.3, leaves, &view);
        assert_eq!(got, direct, "{view:?}");
    }
}

#[test]
fn every_path_from_the_root_weighs_one() {
    let leaves = 3_000;
    let h = hierarchy("lod_paths", leaves);
    let m = h.1.len();
    let mut drawn_somewhere = 0usize;
    for view in views() {
        let w = weights::<Cpu>(&h, leaves, &view);
        assert!(w.iter().all(|&v| (0.0..=1.0).contains(&v)), "{view:?}");
        for leaf in 0..leaves {
            let (mut node, mut sum) = (leaf, 0.0f64);
            loop {
                sum += f64::from(w[node]);
                if node == m - 1 {
                    break;
                }
                node = h.3[node] as usize;
            }
            assert!((sum - 1.0).abs() < 1e-5, "{view:?}: leaf {leaf}'s path weighs {sum}");
        }
        let merged = w[leaves..].iter().filter(|&&v| v > 0.0).count();
        drawn_somewhere += merged;
        if view.threshold == 0.0 {
            assert!(w[..leaves].iter().all(|&v| v == 1.0), "{view:?}");
            assert_eq!(merged, 0, "{view:?}");
        }
    }
    assert!(drawn_somewhere > 0, "no view drew a merged node");
}

#[test]
fn far_views_draw_fewer_nodes() {
    let leaves = 3_000;
    let h = hierarchy("lod_far", leaves);
    let drawn = |distance: f64| {
        let view = LodView {
            eye: [distance, 0.0, 0.0],
            focal: 600.0,
            threshold: 1.0,
        };
        weights::<Cpu>(&h, leaves, &view)
            .iter()
            .filter(|&&v| v > 0.0)
            .count()
    };
    let (near, far, farther) = (drawn(4.0), drawn(40.0), drawn(400.0));
    assert!(near > far && far > farther, "{near} {far} {farther}");
    assert!(farther < leaves / 10, "{farther}");
}

#[test]
fn shapes_and_leaf_counts_are_checked() {
    let device = Default::default();
    let view = LodView {
        eye: [0.0; 3],
        focal: 100.0,
        threshold: 1.0,
    };
    let parents = Tensor::<Cpu, 1, Int>::from_data(TensorData::new(vec![2i64, 2, 2], [3]), &device);
    let ones = Tensor::<Cpu, 1>::ones([3], &device);
    let err = lod_weights(
        Tensor::<Cpu, 2>::zeros([3, 2], &device),
        ones.clone(),
        ones.clone(),
        parents.clone(),
        2,
        &view,
    )
    .unwrap_err();
    assert!(matches!(err, LodError::Shape { name: "centres", .. }), "{err}");
    let err = lod_weights(
        Tensor::<Cpu, 2>::zeros([3, 3], &device),
        ones.clone(),
        ones,
        parents,
        4,
        &view,
    )
    .unwrap_err();
    assert_eq!(err, LodError::Leaves { leaves: 4, nodes: 3 });
}

#[test]
fn the_cpu_gather_matches_select_and_the_tensor_ops() {
    let m = 3_000;
    let rest = 9;
    let mut rng = fresh_rng("lod_gather");
    let mut values = |width: usize, lo: f64, hi: f64| -> Vec<f32> {
        uniform(&mut rng, m * width, lo, hi)
            .into_iter()
            .map(|v| v as f32)
            .collect()
    };
    let params = [
        (values(3, -2.0, 2.0), 3),
        (values(4, -1.0, 1.0), 4),
        (values(3, -5.0, -1.0), 3),
        (values(1, -6.0, 6.0), 1),
        (values(3, -1.0, 1.0), 3),
        (values(rest, -0.3, 0.3), rest),
    ];
    let rows: Vec<u32> = (0..m as u32).filter(|r| r % 3 != 1).rev().collect();
    let weights: Vec<f32> = (0..rows.len())
        .map(|i| if i % 4 == 0 { 1.0 } else { (i % 97) as f32 / 97.0 + 0.005 })
        .collect();
    let device = Default::default();
    let tensor = |(v, w): &(Vec<f32>, usize)| {
        Tensor::<Cpu, 2>::from_data(TensorData::new(v.clone(), [m, *w]), &device)
            .into_primitive()
            .tensor()
    };
    let logits = Tensor::<Cpu, 1>::from_data(TensorData::new(params[3].0.clone(), [m]), &device)
        .into_primitive()
        .tensor();
    let nodes = LodNodes::<Cpu> {
        means: tensor(&params[0]),
        quats: tensor(&params[1]),
        log_scales: tensor(&params[2]),
        opacity_logits: logits,
        sh_dc: tensor(&params[4]),
        sh_rest: tensor(&params[5]),
    };
    let got = <Cpu as LodOps>::lod_gather(nodes.clone(), &rows, &weights);
    let want = lod_gather_tensor_ops(nodes, &rows, &weights);
    let host = |p| {
        Tensor::<Cpu, 1>::from_primitive(TensorPrimitive::Float(p))
            .into_data()
            .convert::<f32>()
            .into_vec::<f32>()
            .unwrap()
    };
    let flat = |p| {
        let t = Tensor::<Cpu, 2>::from_primitive(TensorPrimitive::Float(p));
        let n = t.shape().num_elements();
        host(t.reshape([n]).into_primitive().tensor())
    };
    assert_eq!(flat(got.means), flat(want.means));
    assert_eq!(flat(got.quats), flat(want.quats));
    assert_eq!(flat(got.log_scales), flat(want.log_scales));
    assert_eq!(flat(got.sh_dc), flat(want.sh_dc));
    assert_eq!(flat(got.sh_rest), flat(want.sh_rest));
    let (got, want) = (host(got.opacity_logits), host(want.opacity_logits));
    for (i, ((g, w), &weight)) in got.iter().zip(&want).zip(&weights).enumerate() {
        if weight == 1.0 {
            assert_eq!(g.to_bits(), params[3].0[rows[i] as usize].to_bits(), "row {i}");
        }
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "row {i}: {g} against {w}");
        let opacity = |l: f32| 1.0 / (1.0 + (-l).exp());
        let expected = opacity(params[3].0[rows[i] as usize]) * weight;
        assert!((opacity(*g) - expected).abs() < 1e-6, "row {i}");
    }
}

#[test]
fn the_cpu_leaves_are_the_first_rows_shared_whatever_the_rank() {
    let (m, leaves) = (1_000, 613);
    let mut rng = fresh_rng("lod_leaves");
    let device = Default::default();
    let mut tensor = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = uniform(&mut rng, n, -2.0, 2.0)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        Tensor::<Cpu, 3>::from_data(TensorData::new(values, [shape[0], shape[1], shape[2]]), &device)
    };
    let (means, sh_dc, sh_rest) = (tensor(&[m, 3, 1]), tensor(&[m, 1, 3]), tensor(&[m, 3, 3]));
    let flat2 = |t: Tensor<Cpu, 3>, w: usize| t.reshape([m, w]).into_primitive().tensor();
    let nodes = LodNodes::<Cpu> {
        means: flat2(means, 3),
        quats: flat2(tensor(&[m, 4, 1]), 4),
        log_scales: flat2(tensor(&[m, 3, 1]), 3),
        opacity_logits: tensor(&[m, 1, 1]).reshape([m]).into_primitive().tensor(),
        sh_dc: sh_dc.into_primitive().tensor(),
        sh_rest: sh_rest.into_primitive().tensor(),
    };
    let start = |p: &burn::tensor::ops::FloatTensor<Cpu>| {
        crate::ndarray_host::host_slice::<f32, Cpu>(p).as_ptr()
    };
    let starts = [&nodes.means, &nodes.sh_dc, &nodes.sh_rest].map(start);
    let got = <Cpu as LodOps>::lod_leaves(nodes.clone(), leaves);
    assert_eq!([&got.means, &got.sh_dc, &got.sh_rest].map(start), starts, "copied");
    let want = crate::lod::lod_leaves_tensor_ops(nodes, leaves);
    let values = |p: burn::tensor::ops::FloatTensor<Cpu>| {
        let shape = burn::tensor::TensorMetadata::shape(&p).to_vec();
        (shape, crate::ndarray_host::to_host::<f32, Cpu>(p))
    };
    for (name, got, want) in [
        ("means", got.means, want.means),
        ("quats", got.quats, want.quats),
        ("log_scales", got.log_scales, want.log_scales),
        ("opacity_logits", got.opacity_logits, want.opacity_logits),
        ("sh_dc", got.sh_dc, want.sh_dc),
        ("sh_rest", got.sh_rest, want.sh_rest),
    ] {
        let (got, want) = (values(got), values(want));
        assert_eq!(got.0[0], leaves, "{name}");
        assert_eq!(got, want, "{name}");
    }
}
