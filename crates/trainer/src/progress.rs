//! What a training run shows on the terminal: a progress bar (step, loss, PSNR, Gaussians,
//! steps/s, ETA) or, when the output is not a terminal, a plain line every few seconds; the
//! evaluations and the run's messages above it; and the Ctrl-C flag that ends a run after the
//! step in progress.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use ember_train::{EvalReport, RunObserver, StepReport};
use indicatif::{ProgressBar, ProgressStyle};
use signal_hook::consts::SIGINT;

/// Seconds between two plain progress lines when the output is not a terminal.
const PLAIN_PROGRESS_EVERY_S: f64 = 10.0;

/// The progress bar (step, loss, PSNR, Gaussians, steps/s and ETA), or a plain line every
/// [`PLAIN_PROGRESS_EVERY_S`] seconds when the output is not a terminal; and the Ctrl-C flag.
pub struct Progress {
    pub bar: ProgressBar,
    last_psnr: Option<f32>,
    last_eval: Option<f32>,
    smoothed_loss: Option<f32>,
    /// When the last plain progress line was printed, and at which step.
    last_plain: (Instant, usize),
    /// Set by the first SIGINT (a second one exits at once with status 130).
    interrupted: Arc<AtomicBool>,
}

impl Progress {
    pub fn new(total: usize, interrupted: Arc<AtomicBool>) -> Progress {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} {rate} ETA {eta} {msg}",
            )
            .map(|style| {
                style.with_key(
                    "rate",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.1} steps/s", state.per_sec());
                    },
                )
            })
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Progress {
            bar,
            last_psnr: None,
            last_eval: None,
            smoothed_loss: None,
            last_plain: (Instant::now(), 0),
            interrupted,
        }
    }
}

impl Progress {
    /// A line on standard output, above the bar when there is one.
    pub fn line(&self, text: &str) {
        self.bar.suspend(|| println!("{text}"));
    }
}

impl<B: ember_train::SplatAutodiffBackend> RunObserver<B> for Progress {
    fn on_step(&mut self, report: &StepReport, total: usize) {
        // Exponential moving average, as the loss of one view is noisy.
        if let Some(loss) = report.loss {
            self.smoothed_loss = Some(match self.smoothed_loss {
                Some(s) => 0.9 * s + 0.1 * loss,
                None => loss,
            });
        }
        if report.psnr.is_some() {
            self.last_psnr = report.psnr;
        }
        self.bar.set_position(report.step as u64);
        let fmt = |v: Option<f32>| v.map(|p| format!("{p:.2}")).unwrap_or("-".into());
        let status = format!(
            "loss {} psnr {} eval {} | {} Gaussians",
            self.smoothed_loss
                .map(|l| format!("{l:.4}"))
                .unwrap_or("-".into()),
            fmt(self.last_psnr),
            fmt(self.last_eval),
            report.gaussians
        );
        let (since, from_step) = self.last_plain;
        let seconds = since.elapsed().as_secs_f64();
        if self.bar.is_hidden() && seconds >= PLAIN_PROGRESS_EVERY_S {
            println!(
                "step {}/{total} ({:.1} steps/s) {status}",
                report.step,
                (report.step - from_step) as f64 / seconds
            );
            self.last_plain = (Instant::now(), report.step);
        }
        self.bar.set_message(status);
    }

    fn on_eval(&mut self, report: &EvalReport) {
        self.last_eval = Some(report.psnr);
        self.line(&format!(
            "eval @ {:>6}: PSNR {:.2} dB, SSIM {:.4}{}, colour-corrected {:.2} dB{}, {} \
             Gaussians ({} views, {:.1} s)",
            report.step,
            report.psnr,
            report.ssim,
            lpips_text(report.lpips),
            report.cc_psnr,
            report
                .aligned
                .map(|a| format!(", aligned {:.2} dB", a.psnr))
                .unwrap_or_default(),
            report.gaussians,
            report.views.len(),
            report.seconds
        ));
    }

    fn on_message(&mut self, message: &str) {
        self.line(message);
    }

    fn stop_requested(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }
}

/// `, LPIPS x` when it was measured.
pub fn lpips_text(lpips: Option<f32>) -> String {
    lpips.map_or(String::new(), |v| format!(", LPIPS {v:.4}"))
}

/// The Ctrl-C flag (a second Ctrl-C exits at once).
pub fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for handler in [
        signal_hook::flag::register_conditional_shutdown(SIGINT, 130, interrupted.clone()),
        signal_hook::flag::register(SIGINT, interrupted.clone()),
    ] {
        handler.context("installing the Ctrl-C handler")?;
    }
    Ok(interrupted)
}
