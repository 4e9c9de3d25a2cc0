//! Locating the shared test data.

use std::path::PathBuf;

/// `EMBER_DATA_DIR`, default `<workspace root>/../shared/data`.
pub fn data_dir() -> PathBuf {
    std::env::var_os("EMBER_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"))
}

/// The path of `relative` under the data folder, or `None` (after saying so) when it is missing;
/// with `EMBER_REQUIRE_DATA=1` a missing file fails the test instead.
pub fn data_path(relative: &str) -> Option<PathBuf> {
    let path = data_dir().join(relative);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("EMBER_REQUIRE_DATA").as_deref() == Ok("1") {
        panic!("EMBER_REQUIRE_DATA=1 but {} does not exist", path.display());
    }
    eprintln!("skipped: test data {} not found", path.display());
    None
}
