//! The command line: [`Args`] (training's flags, [`ConfigArgs`] among them) and the
//! subcommands ([`Command`]), each dispatched to its module on the backend `--backend` names.
//! A new subcommand is a module with its `clap::Args` and a function generic over the backend,
//! a variant here and its line in [`Command::run`].

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::backend::{Backend, on_backend};
use crate::bench::BenchCommand;
use crate::presets::ConfigArgs;
use crate::splat_tools::SplatCommand;
use crate::view::ListenArgs;
use crate::{bench, data, eval, lod, metrics, splat_tools, view};

/// Train a 3D Gaussian-splatting scene.
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Args {
    #[command(flatten)]
    pub run: ConfigArgs,
    /// Output folder.
    #[arg(long, value_name = "DIR", default_value = "runs/latest")]
    pub out: PathBuf,
    /// Backend (among the compiled cargo features); `EMBER_BACKEND` sets it when the flag is
    /// not given. Default: cuda, then wgpu, then ndarray, the first compiled in; on a machine
    /// whose wgpu adapter is a software rasterizer (no GPU), ndarray.
    #[arg(
        long = "backend",
        value_enum,
        env = "EMBER_BACKEND",
        value_name = "BACKEND"
    )]
    pub backend_choice: Option<Backend>,
    /// The backend the commands run on: `backend_choice`, else [`Backend::default_here`].
    #[arg(skip = Backend::default_compiled())]
    pub backend: Backend,
    /// Continue from a checkpoint written by an earlier run.
    #[arg(long, value_name = "CHECKPOINT")]
    pub resume: Option<PathBuf>,
    /// Print the effective config and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Serve the live viewer while training: the field as it trains, curves, held-out views,
    /// pause and checkpoint buttons (port 7878 unless given here or as `--port`; 0 picks a
    /// free one).
    #[arg(long, value_name = "PORT", num_args = 0..=1)]
    pub view: Option<Option<u16>>,
    #[command(flatten)]
    pub listen: ListenArgs,
    /// A splat-file operation or a benchmark instead of training.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What `trainer` does instead of training.
#[derive(Subcommand, Debug)]
pub enum Command {
    #[command(flatten)]
    Splat(SplatCommand),
    /// Serve a splat file, checkpoint or run folder to the browser (`--backend` renders it).
    View(view::ViewArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Level of detail: build a scene's hierarchy.
    #[command(subcommand)]
    Lod(lod::LodCommand),
    /// Datasets: split 360° frames into a rig's perspective images, render a 360° walk.
    #[command(subcommand)]
    Data(data::DataCommand),
    /// PSNR, SSIM and LPIPS of two images of one size (PNG or JPEG).
    Metrics(metrics::MetricsArgs),
    /// PSNR, SSIM and LPIPS of a run (or a splat file) on a dataset split, per view and mean.
    Eval(eval::EvalArgs),
    /// Train and evaluate a suite of scenes (configs/suites/*.toml): a paper-style table of
    /// PSNR, SSIM, LPIPS, training time, Gaussians and peak memory, markdown and JSON.
    Benchmark(bench::suite::BenchmarkArgs),
    /// Serve the orchestrator of a multi-node run (`distributed.nodes > 1`) until Ctrl-C: every
    /// node registers with it and learns the others' addresses. No authentication: private
    /// networks only.
    Orchestrator {
        /// The port to listen on (every interface): `distributed.orchestrator`'s.
        #[arg(long, default_value_t = 7070)]
        port: u16,
    },
    /// Two `trainer bench` result files side by side, with B's speed-up over A.
    Compare {
        /// The baseline's JSON.
        a: PathBuf,
        /// The candidate's JSON.
        b: PathBuf,
    },
}

impl Args {
    /// The command line, with `--backend` handed to the commands whose presets or child
    /// processes depend on it.
    pub fn parse_command_line() -> Args {
        let mut args = Args::parse();
        args.backend = match args.backend_choice {
            Some(backend) => backend,
            None => {
                let (backend, note) = Backend::default_here();
                if let Some(note) = note {
                    eprintln!("{note}");
                }
                backend
            }
        };
        args.run.backend = args.backend;
        match &mut args.command {
            Some(Command::Bench(BenchCommand::Train(bench))) => bench.run.backend = args.backend,
            Some(Command::Bench(BenchCommand::View(bench))) => bench.run.backend = args.backend,
            Some(Command::Bench(BenchCommand::Allreduce(bench))) => bench.backend = args.backend,
            Some(Command::Benchmark(suite)) => suite.backend = args.backend,
            _ => {}
        }
        args
    }
}

impl Command {
    /// Runs the command on `backend` (the commands that draw or train).
    pub fn run(&self, backend: Backend) -> Result<()> {
        match self {
            Command::Splat(SplatCommand::Render(args)) => {
                on_backend!(backend, B => splat_tools::render_png::<B>(args, &Default::default()))
            }
            Command::Splat(other) => splat_tools::run(other),
            Command::View(args) => {
                on_backend!(backend, B => view::view::<B>(args, &Default::default()))
            }
            Command::Bench(bench) => bench.run(backend),
            Command::Lod(command) => lod::run(command),
            Command::Data(command) => {
                on_backend!(backend, B => data::run::<B>(command, &Default::default()))
            }
            Command::Metrics(args) => {
                on_backend!(backend, B => metrics::metrics::<B>(args, &Default::default()))
            }
            Command::Eval(args) => {
                on_backend!(backend, B => eval::eval::<B>(args, &Default::default()))
            }
            Command::Benchmark(args) => {
                on_backend!(backend, B => bench::suite::benchmark::<B>(args, &Default::default()))
            }
            Command::Compare { a, b } => bench::compare(a, b),
            Command::Orchestrator { port } => {
                ember_train::parallel::check_port_free(*port, "the orchestrator")?;
                println!(
                    "orchestrator: listening on port {port} (every interface); Ctrl-C stops it"
                );
                ember_train::parallel::serve_orchestrator(*port)
                    .context("serving the orchestrator")?;
                println!("orchestrator: stopped");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    /// `--port` means the same for `trainer view` and for training with `--view`.
    #[test]
    fn the_viewer_port_is_one_flag_for_both_commands() {
        let training = Args::try_parse_from(["trainer", "--view", "--port", "0"]).unwrap();
        assert_eq!(training.view, Some(None));
        assert_eq!(training.listen.port(None).unwrap(), 0);
        let given = Args::try_parse_from(["trainer", "--view", "9000"]).unwrap();
        assert_eq!(given.listen.port(given.view.flatten()).unwrap(), 9000);
        let default = Args::try_parse_from(["trainer", "--view"]).unwrap();
        let port = default.listen.port(default.view.flatten()).unwrap();
        assert_eq!(port, ember_viewer::DEFAULT_PORT);
        let both = Args::try_parse_from(["trainer", "--view", "1", "--port", "2"]).unwrap();
        let error = both
            .listen
            .port(both.view.flatten())
            .unwrap_err()
            .to_string();
        assert!(error.contains("two ports"), "{error}");
        assert!(Args::try_parse_from(["trainer", "view", "scene.ply", "--port", "0"]).is_ok());
    }
}
