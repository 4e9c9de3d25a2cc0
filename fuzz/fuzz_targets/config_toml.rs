//! The training config on arbitrary text: parsed and validated, and any config it accepts
//! survives a round trip through the TOML a run records.
#![no_main]

use ember_train::TrainConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = TrainConfig::from_toml_str(text, "fuzz.toml") {
        let recorded = config.to_toml_string();
        let again = TrainConfig::from_toml_str(&recorded, "recorded")
            .expect("a config the parser accepted must parse again from its own TOML");
        assert_eq!(again.to_toml_string(), recorded);
        let _ = config.to_annotated_toml();
    }
});
