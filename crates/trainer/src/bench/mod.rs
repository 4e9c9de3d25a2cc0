//! The benchmark commands: `trainer bench render|train|data|view|allreduce|lod` (one file
//! each, JSON out as `ember_bench::BenchFile`), `trainer benchmark` (a suite of scenes trained
//! into a paper-style table, [`suite`]), `trainer compare` (two result files side by side), and
//! what they share.

pub mod allreduce;
pub mod data;
pub mod lod;
pub mod render;
pub mod suite;
pub mod train;
pub mod view;

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;
use ember_bench::{BenchFile, comparison_table};

use crate::backend::{Backend, on_backend};

/// `trainer bench ...`.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Render a splat file over view sets (a dataset's train and test views, an orbit at
    /// `--resolution`): ms per frame (median, min, max), FPS, peak host memory; JSON out.
    Render(render::RenderBenchArgs),
    /// Time `--steps` training steps (default 100) of a config, without evaluation, checkpoints
    /// or exports: steps/s and ms per step of each phase (median, min, max); JSON out.
    Train(train::TrainBenchArgs),
    /// Time the image pipeline on a dataset: cold passes (decode) and warm passes (cache,
    /// prefetch, upload): images/s, MB/s, wait fraction, peak host memory; JSON out.
    Data(data::DataBenchArgs),
    /// The viewer as a page sees it: frame latency (p50, p95) and FPS over an orbit, the
    /// renderer's share of it; with `--train`, training speed with and without a page asking
    /// for frames; JSON out.
    View(view::ViewBenchArgs),
    /// Averaging a field's gradients across local peers with Burn's collective engine (the cost
    /// data-parallel training adds per step): ms per all-reduce by peers and Gaussian count;
    /// JSON out.
    Allreduce(allreduce::AllReduceBenchArgs),
    /// Level of detail against the full render over orbits at 1x, 2x, 4x and 8x the framing
    /// distance: ms each way, speed-up, Gaussians drawn, PSNR against the full image; JSON out.
    Lod(lod::LodBenchArgs),
}

impl BenchCommand {
    /// Runs the benchmark on `backend`.
    pub fn run(&self, backend: Backend) -> Result<()> {
        match self {
            BenchCommand::Render(args) => {
                on_backend!(backend, B => render::bench_render::<B>(args, &Default::default()))
            }
            BenchCommand::Train(args) => {
                on_backend!(backend, B => train::bench_train::<B>(args, &Default::default()))
            }
            BenchCommand::Data(args) => {
                on_backend!(backend, B => data::bench_data::<B>(args, &Default::default()))
            }
            BenchCommand::View(args) => {
                on_backend!(backend, B => view::bench_view::<B>(args, &Default::default()))
            }
            BenchCommand::Allreduce(args) => {
                on_backend!(backend, B => allreduce::bench_allreduce::<B>(args, &Default::default()))
            }
            BenchCommand::Lod(args) => {
                on_backend!(backend, B => lod::bench_lod::<B>(args, &Default::default()))
            }
        }
    }
}

/// `WxH` as a size in pixels, both sides positive.
pub(crate) fn parse_resolution(text: &str) -> Result<(u32, u32), String> {
    let (w, h) = text.split_once('x').ok_or("expected WxH, e.g. 800x800")?;
    let side = |v: &str| -> Result<u32, String> {
        match v.trim().parse::<u32>() {
            Ok(0) | Err(_) => Err(format!("`{v}` is not a positive integer")),
            Ok(n) => Ok(n),
        }
    };
    Ok((side(w)?, side(h)?))
}

/// Prints the peak host memory of `file` and writes it to `path` (atomically).
pub fn write_bench_file(file: &BenchFile, path: &Path) -> Result<()> {
    if let Some(mib) = file.peak_host_mib {
        println!("peak host memory: {mib:.0} MiB");
    }
    file.write(path)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// `trainer compare A.json B.json`: the sets of both side by side with B's speed-up over A.
pub fn compare(a: &Path, b: &Path) -> Result<()> {
    let (fa, fb) = (BenchFile::read(a)?, BenchFile::read(b)?);
    for (label, path, file) in [("A", a, &fa), ("B", b, &fb)] {
        println!(
            "{label}: {} ({}, {}, {}, {} Gaussians)",
            path.display(),
            file.tool,
            file.backend,
            file.input,
            file.gaussians
        );
    }
    println!("\n{}", comparison_table(&fa, &fb));
    Ok(())
}
