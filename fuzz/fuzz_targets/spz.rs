//! The SPZ reader (gzip, raw and v4 zstd streams) on arbitrary bytes.
#![no_main]

use std::path::Path;

use ember_data::splats::spz;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = spz::parse(data, Path::new("fuzz.spz"));
});
