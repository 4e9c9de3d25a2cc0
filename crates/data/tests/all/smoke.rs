//! `smoke_dataset`: one 50x50 RGBA view, `transforms.json` with nerfstudio intrinsics, and an
//! `init.ply` of 100 coloured points.

use ember_data::{Dataset, DatasetFormat, DatasetOptions, ImageLoader, LoaderOptions};

use crate::common::data_path;

#[test]
fn smoke_dataset_loads_with_its_point_cloud() {
    let Some(root) = data_path("smoke_dataset") else {
        return;
    };
    let options = DatasetOptions {
        point_cloud: Some("init.ply".into()),
        ..DatasetOptions::default()
    };
    let dataset = Dataset::load(&root, &options).unwrap();
    assert!(matches!(dataset.format, DatasetFormat::Transforms { .. }));
    // A single view is trained on, not held out.
    assert_eq!(
        (dataset.train.len(), dataset.val.len(), dataset.test.len()),
        (1, 0, 0)
    );
    let view = &dataset.train[0];
    assert_eq!(view.name, "train/r_0.png");
    let camera = view.camera();
    // The explicit fl_x / cx win over the file's (inconsistent) camera_angle_x.
    assert_eq!(
        (camera.fx, camera.fy, camera.cx, camera.cy),
        (50.0, 50.0, 25.0, 25.0)
    );
    assert_eq!((camera.width, camera.height), (50, 50));
    assert!(view.distortion.is_none());

    let points = dataset.points.as_ref().expect("init.ply");
    assert_eq!(points.len(), 100);
    let colors = points.colors.as_ref().expect("the PLY has red green blue");
    assert_eq!(colors.len(), 100);
    assert!(points.positions.iter().flatten().all(|v| v.is_finite()));

    // The image decodes to the camera's size and uploads as [H, W, 3] in [0, 1].
    let loader = ImageLoader::new(vec![view.source.clone()], LoaderOptions::default()).unwrap();
    let image = loader.get(0).unwrap().unwrap();
    assert_eq!((image.width, image.height), (50, 50));
    let device = Default::default();
    let tensor = image.to_tensor::<ember_kernels::backend::Cpu>(&device);
    assert_eq!(tensor.dims(), [50, 50, 3]);
    let values = tensor.into_data().to_vec::<f32>().unwrap();
    assert!(values.iter().all(|v| (0.0..=1.0).contains(v)));
    assert_eq!(values[0], image.data[0] as f32 / 255.0);
}
