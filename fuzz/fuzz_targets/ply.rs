//! The PLY point-cloud reader on arbitrary bytes.
#![no_main]

use std::path::Path;

use ember_data::points::parse_ply;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_ply(data, Path::new("fuzz.ply"));
});
