//! `[resolution]`: coarse to fine, the training photos and their cameras shrunk early in a run.

use serde::{Deserialize, Serialize};

/// Coarse to fine: the first steps train on the photos shrunk by a power-of-two factor (each
/// output pixel the mean of a `k x k` block, the camera's focal lengths and principal point
/// divided by `k`), the factor halving at evenly spaced steps until the photos are used at
/// their size from `full_at` on. Early steps learn the scene's coarse shape, which needs few
/// pixels, at a fraction of the compositing cost; held-out evaluation always renders at full
/// size.
///
/// The factor at (0-based) step `s < full_at` is `start / 2^floor(log2(start) s / full_at)`:
/// with `start = 4, full_at = 1000`, 4 until step 500, 2 until 1000, then 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResolutionConfig {
    /// The factor the photos are shrunk by at the first step: 1 (off), 2, 4, 8 or 16.
    pub start: u32,
    /// The first step at full size.
    pub full_at: usize,
}

impl Default for ResolutionConfig {
    fn default() -> Self {
        ResolutionConfig {
            start: 1,
            full_at: 0,
        }
    }
}

impl ResolutionConfig {
    /// The factor the photos of (0-based) step `step` are shrunk by.
    pub fn factor_at(&self, step: usize) -> u32 {
        if self.start <= 1 || step >= self.full_at {
            return 1;
        }
        let levels = self.start.trailing_zeros() as usize;
        let halvings = step * levels / self.full_at;
        self.start >> halvings
    }

    /// Checks the values no type can; `Err` names the key.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(self.start.is_power_of_two() && self.start <= 16) {
            return Err("`resolution.start` must be 1, 2, 4, 8 or 16".to_string());
        }
        if self.start > 1 && self.full_at == 0 {
            return Err(
                "`resolution.full_at` must be a step above 0 when `resolution.start` is above 1"
                    .to_string(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factor_halves_at_evenly_spaced_steps() {
        let schedule = ResolutionConfig {
            start: 4,
            full_at: 1000,
        };
        let at = |s| schedule.factor_at(s);
        assert_eq!(
            [at(0), at(499), at(500), at(999), at(1000)],
            [4, 4, 2, 2, 1]
        );
        let eight = ResolutionConfig {
            start: 8,
            full_at: 300,
        };
        let at = |s| eight.factor_at(s);
        assert_eq!(
            [at(0), at(99), at(100), at(200), at(299), at(300)],
            [8, 8, 4, 2, 2, 1]
        );
        assert_eq!(ResolutionConfig::default().factor_at(0), 1);
        assert!(ResolutionConfig::default().validate().is_ok());
        for (start, full_at) in [(3, 100), (32, 100), (0, 100), (2, 0)] {
            assert!(ResolutionConfig { start, full_at }.validate().is_err());
        }
    }
}
