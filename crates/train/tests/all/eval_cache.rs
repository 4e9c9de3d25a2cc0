//! The evaluation renders' cache on the trainer: a second evaluation of an unchanged field
//! renders nothing and reports the same numbers; any change of the parameters invalidates it.

use ember_train::Trainer;

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
