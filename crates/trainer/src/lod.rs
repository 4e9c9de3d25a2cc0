//! `trainer lod build`: a level-of-detail hierarchy of a splat file, checkpoint or run folder
//! (see `ember_data::lod` for the tree, the merges and the file).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use ember_data::{HierarchyConfig, build_hierarchy, write_hierarchy};
use ember_field::splats::splats_from_field;

use crate::guard::not_an_input;
use crate::inputs::load_field;

/// `trainer lod ...`.
#[derive(Subcommand, Debug)]
pub enum LodCommand {
    /// Merge a scene's Gaussians into a level-of-detail hierarchy (moment matching over a
    /// Morton order) and write it: a 3DGS PLY whose `vertex` element is the scene's Gaussians
    /// unchanged, followed by the merged nodes and the tree (`trainer view` and `trainer bench
    /// lod` draw the cut each view needs; any 3DGS tool reads the leaves).
    Build(LodBuildArgs),
}

/// `trainer lod build IN --out OUT [--branching N]`.
#[derive(Args, Debug)]
pub struct LodBuildArgs {
    /// A splat file (.ply, .compressed.ply, .splat, .spz), checkpoint or run folder.
    input: PathBuf,
    /// The hierarchy to write (`.ply`; `NAME.lod.ply` says what it is).
    #[arg(long, value_name = "OUT.ply")]
    out: PathBuf,
    /// Nodes of one level merged into one node of the next.
    #[arg(long, default_value_t = HierarchyConfig::default().branching)]
    branching: usize,
}

/// Runs `command`.
pub fn run(command: &LodCommand) -> Result<()> {
    let LodCommand::Build(args) = command;
    not_an_input("--out", &args.out, &[&args.input])?;
    if !args
        .out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("ply"))
    {
        anyhow::bail!(
            "--out {}: a hierarchy is written as a PLY (name it NAME.lod.ply)",
            args.out.display()
        );
    }
    let started = Instant::now();
    let (field, _) = load_field::<crate::backend::Cpu>(&args.input, &Default::default())?;
    let splats = splats_from_field(&field)?;
    drop(field);
    let loaded = started.elapsed().as_secs_f64();
    let building = Instant::now();
    let config = HierarchyConfig {
        branching: args.branching,
    };
    let hierarchy = build_hierarchy(&splats, &config, &args.input)?;
    let built = building.elapsed().as_secs_f64();
    write_hierarchy(&args.out, &hierarchy)
        .with_context(|| format!("writing {}", args.out.display()))?;
    let levels = {
        let mut depth = vec![0u32; hierarchy.len()];
        for n in (0..hierarchy.len().saturating_sub(1)).rev() {
            depth[n] = depth[hierarchy.parents[n] as usize] + 1;
        }
        depth.iter().max().map_or(0, |d| d + 1)
    };
    println!(
        "{}: {} Gaussians -> {} nodes ({:.2}x the leaves), {levels} levels, built in {built:.2} s \
         (loaded in {loaded:.2} s){}; wrote {}",
        args.input.display(),
        hierarchy.leaves,
        hierarchy.len(),
        hierarchy.len() as f64 / hierarchy.leaves.max(1) as f64,
        ember_bench::peak_host_mib().map_or(String::new(), |m| format!(", peak memory {m:.0} MiB")),
        args.out.display()
    );
    Ok(())
}
