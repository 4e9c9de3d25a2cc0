//! The checkpoint reader (safetensors, metadata, shapes) on arbitrary bytes.
#![no_main]

use std::path::Path;

use ember_train::checkpoint::CheckpointFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = CheckpointFile::parse(data, Path::new("fuzz.safetensors"));
});
