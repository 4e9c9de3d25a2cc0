//! The `trainer` binary's subcommands, run as a user runs them.

mod bad_inputs;
mod bench_commands;
mod benchmark;
mod browser;
mod common;
mod eval;
mod lod;
mod metrics;
mod multi_node;
mod panorama;
mod render_path;
mod splat_commands;
mod view_command;
mod viewer;
mod viewer_after_training;
mod viewer_editing;
mod viewer_framing;
