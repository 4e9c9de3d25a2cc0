//! The evaluation renders' cache on the trainer: a second evaluation of an unchanged field
//! renders nothing and reports the same numbers; any change of the parameters invalidates it.

use ember_train::Trainer;
use ember_train::eval::{EvalRequest, Evaluator};

use crate::common::{self, B};

#[test]
fn evaluating_an_unchanged_field_again_hits_the_cache() {
    let config = common::tiny_config();
    let scene = common::scene(&config);
    let views = scene.eval.len() as u64;
    let mut trainer = Trainer::<B>::new(config, scene, &Default::default()).unwrap();
    trainer.step().unwrap();

    let first = trainer.evaluate().unwrap();
    let stats = trainer.eval_cache_stats();
    assert_eq!((stats.hits, stats.misses), (0, views));
    let again = trainer.evaluate().unwrap();
    let stats = trainer.eval_cache_stats();
    assert_eq!((stats.hits, stats.misses), (views, views));
    assert_eq!(again.views, first.views);
    assert_eq!(again.images, first.images);

    // A step changes the field: the next evaluation renders every view again.
    let generation = trainer.generation();
    trainer.step().unwrap();
    assert_ne!(trainer.generation(), generation);
    let after_step = trainer.evaluate().unwrap();
    let stats = trainer.eval_cache_stats();
    assert_eq!((stats.hits, stats.misses), (views, 2 * views));
    assert_eq!(stats.invalidations, views);
    assert_ne!(after_step.views, first.views);

    // So does replacing the parameters (even with equal values: the cache cannot tell).
    let same = trainer.field().clone();
    trainer.replace_field(same).unwrap();
    trainer.evaluate().unwrap();
    assert_eq!(trainer.eval_cache_stats().misses, 3 * views);
}

/// `eval.lpips = "last"`: the run's evaluations before its last step leave LPIPS out, the last
/// measures it; an evaluation asking for LPIPS of renders cached without it measures them
/// without rendering again, to the value a fresh evaluation gives.
#[test]
fn lpips_last_measures_the_last_evaluation_and_completes_cached_renders() {
    let Some(weights) = common::data_path("lpips/alex.safetensors") else {
        return;
    };
    let mut config = common::tiny_config()
        .with_overrides(&["steps=2", "eval.lpips=\"last\""])
        .unwrap();
    config.eval.lpips_weights = Some(weights);
    let scene = common::scene(&config);
    let views = scene.eval.len() as u64;
    let mut trainer =
        Trainer::<B>::new(config.clone(), scene.clone(), &Default::default()).unwrap();
    trainer.step().unwrap();
    let early = trainer.evaluate().unwrap();
    assert!(early.lpips.is_none() && early.views.iter().all(|v| v.lpips.is_none()));
    assert!(early.lpips_off.is_none(), "not measured is not off");
    trainer.step().unwrap();
    let last = trainer.evaluate().unwrap();
    let lpips = last.lpips.expect("the last evaluation measures LPIPS");
    assert!(lpips > 0.0 && lpips < 1.0, "{lpips}");

    // The evaluator itself: without LPIPS, then with it at the same generation.
    let field = trainer.field().clone();
    let request = |lpips| EvalRequest {
        generation: 7,
        step: 2,
        sh_degree: 1,
        antialiased: false,
        lpips,
    };
    let mut evaluator = Evaluator::<ember_kernels::backend::Cpu>::new(&config.eval);
    let without = evaluator.evaluate(&scene, &field, request(false)).unwrap();
    assert!(without.lpips.is_none());
    let with = evaluator.evaluate(&scene, &field, request(true)).unwrap();
    let stats = evaluator.cache_stats();
    assert_eq!(
        (stats.hits, stats.misses),
        (views, views),
        "no render again"
    );
    let fresh = Evaluator::new(&config.eval)
        .evaluate(&scene, &field, request(true))
        .unwrap();
    assert_eq!(with.views, fresh.views);
    assert_eq!(with.lpips, fresh.lpips);
    assert_eq!(with.lpips, last.lpips);
}
