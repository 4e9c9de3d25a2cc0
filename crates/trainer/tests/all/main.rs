//! The `trainer` binary's splat-file subcommands, run as a user runs them.

mod splat_commands;
