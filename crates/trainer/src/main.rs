//! `trainer`: trains a Gaussian-splatting scene from a TOML config.
//!
//! `cargo run --release -p trainer` trains the built-in procedural scene of `configs/quick.toml`
//! (compiled in, so it works without data); `--config FILE` picks another preset, `--data` a
//! scene folder, `--set key=value` overrides any config field, `--view` serves the live
//! viewer during training. The subcommands `convert`, `transform`, `info` and `render` work on
//! splat files (3DGS PLY, `.splat`, SPZ); `view` serves a splat file, checkpoint or run folder
//! to the browser; `metrics` gives PSNR, SSIM and LPIPS of two images, `eval` of a run or a
//! splat file on a dataset split; `benchmark` trains a suite of scenes into a paper-style
//! table; `bench render|train|data|view` time renders, training steps, the image pipeline and
//! the viewer and write JSON (`ember_bench::BenchFile`), `compare` puts two such files side by
//! side; `data split360|walk360` make 360° datasets. See `--help`.

mod backend;
mod bench;
mod cli;
mod data;
mod eval;
mod guard;
mod inputs;
mod lod;
mod metrics;
mod presets;
mod progress;
mod splat_tools;
mod train;
mod view;

use anyhow::Result;

use crate::cli::Args;

/// An error as the user reads it: the outermost message, then each cause that says something
/// the message before it did not (I/O errors often repeat their cause in their own text).
fn error_report(error: &anyhow::Error) -> String {
    let mut report = String::from("error: ");
    let mut previous = String::new();
    for (i, cause) in error.chain().enumerate() {
        let text = cause.to_string();
        if i > 0 {
            if previous.contains(&text) {
                continue;
            }
            report.push_str("\n  caused by: ");
        }
        report.push_str(&text);
        previous = text;
    }
    report
}

fn main() -> std::process::ExitCode {
    match run_command() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            let interrupted = error.chain().find_map(|cause| {
                match cause.downcast_ref::<ember_train::TrainError>() {
                    Some(stop @ ember_train::TrainError::Interrupted { .. }) => Some(stop),
                    _ => None,
                }
            });
            if let Some(stop) = interrupted {
                println!("{stop}");
                // The shell's status for a process ended by SIGINT.
                return std::process::ExitCode::from(130);
            }
            eprintln!("{}", error_report(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_command() -> Result<()> {
    backend::quiet_display_probe();
    // Every step frees and reallocates tens of megabytes of host buffers: keep them in the
    // heap instead of faulting them in again (see `ember_kernels::host_allocator`).
    ember_kernels::host_allocator::keep_freed_memory();
    let args = Args::parse_command_line();
    match &args.command {
        Some(command) => command.run(args.backend),
        None => train::train_command(&args),
    }
}
