//! The `.splat` reader on arbitrary bytes: errors are fine, panics and aborts are not.
#![no_main]

use std::path::Path;

use ember_data::splats::dot_splat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = dot_splat::parse(data, Path::new("fuzz.splat"));
});
