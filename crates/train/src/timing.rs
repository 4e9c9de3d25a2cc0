//! Wall time per phase of the loop.
//!
//! On the GPU backends the device runs asynchronously: a phase's time is when the host finished
//! queueing it, except where a read-back synchronises (the loss value at the end of the forward
//! phase, densification's read-backs, evaluation). The totals stay meaningful; the split
//! between forward, backward and optimizer is exact only on the CPU, or with
//! [`Trainer::set_phase_sync`](crate::Trainer::set_phase_sync), which waits for the device at
//! the end of every phase (and so removes the overlap of host and device work).

use std::time::Duration;

/// A phase of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Fetching the view's image and uploading it.
    Data,
    /// Render, loss and reading the loss back.
    Forward,
    /// `loss.backward()` and collecting the gradients.
    Backward,
    /// The Adam steps.
    Optimizer,
    /// Statistics accumulation and refinement.
    Densify,
    /// Held-out evaluation (and its images).
    Eval,
    /// Checkpoints, exports and metric files.
    Output,
}

impl Phase {
    /// Every phase, in display order.
    pub const ALL: [Phase; 7] = [
        Phase::Data,
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        Phase::Densify,
        Phase::Eval,
        Phase::Output,
    ];

    /// The phases of one [`Trainer::step`](crate::Trainer::step), in the order they run
    /// (densification also runs between backward and optimizer: it observes the gradients).
    pub const STEP: [Phase; 5] = [
        Phase::Data,
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
        Phase::Densify,
    ];

    /// The phase's name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Data => "data wait",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::Densify => "densify",
            Phase::Eval => "eval",
            Phase::Output => "output",
        }
    }
}

/// Accumulated wall time per [`Phase`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PhaseTimes {
    seconds: [f64; 7],
}

impl PhaseTimes {
    /// Adds `elapsed` to `phase`.
    pub fn add(&mut self, phase: Phase, elapsed: Duration) {
        self.seconds[phase as usize] += elapsed.as_secs_f64();
    }

    /// Seconds spent in `phase`.
    pub fn get(&self, phase: Phase) -> f64 {
        self.seconds[phase as usize]
    }

    /// The time spent per phase since `earlier`, a copy of these totals taken before (e.g. the
    /// phases of one step: the totals after it, `since` those before).
    pub fn since(&self, earlier: &PhaseTimes) -> PhaseTimes {
        PhaseTimes {
            seconds: std::array::from_fn(|k| self.seconds[k] - earlier.seconds[k]),
        }
    }

    /// Seconds over all phases.
    pub fn total(&self) -> f64 {
        self.seconds.iter().sum()
    }

    /// A text table: phase, seconds, share of the total.
    pub fn table(&self) -> String {
        let total = self.total().max(1e-12);
        let mut out = format!("{:<10} {:>10} {:>7}\n", "phase", "seconds", "share");
        for phase in Phase::ALL {
            let s = self.get(phase);
            out += &format!(
                "{:<10} {:>10.2} {:>6.1}%\n",
                phase.name(),
                s,
                100.0 * s / total
            );
        }
        out += &format!("{:<10} {:>10.2} {:>6.1}%\n", "total", self.total(), 100.0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulates_and_tabulates() {
        let mut t = PhaseTimes::default();
        t.add(Phase::Forward, Duration::from_millis(300));
        t.add(Phase::Forward, Duration::from_millis(100));
        t.add(Phase::Eval, Duration::from_millis(600));
        assert!((t.get(Phase::Forward) - 0.4).abs() < 1e-9);
        assert!((t.total() - 1.0).abs() < 1e-9);
        let table = t.table();
        assert!(
            table.contains("forward") && table.contains("40.0%"),
            "{table}"
        );
    }

    #[test]
    fn differences_give_the_phases_of_one_step() {
        let mut t = PhaseTimes::default();
        t.add(Phase::Data, Duration::from_millis(5));
        let before = t;
        t.add(Phase::Forward, Duration::from_millis(30));
        t.add(Phase::Densify, Duration::from_millis(2));
        t.add(Phase::Densify, Duration::from_millis(1));
        let step = t.since(&before);
        assert_eq!(step.get(Phase::Data), 0.0);
        assert!((step.get(Phase::Forward) - 0.030).abs() < 1e-12);
        assert!((step.get(Phase::Densify) - 0.003).abs() < 1e-12);
        assert!((step.total() - 0.033).abs() < 1e-12);
    }
}
