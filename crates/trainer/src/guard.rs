//! Checks made before anything is written: an output that is one of the command's inputs, and
//! an operation larger than the memory this machine has.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// `path` with every symbolic link and `..` resolved; a path that does not exist yet is its
/// resolved parent joined with its name (`None` when not even the parent resolves).
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(full) = path.canonicalize() {
        return Some(full);
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(parent.canonicalize().ok()?.join(name))
}

/// Whether `a` and `b` name the same file: the same resolved path, or (on Unix) the same
/// inode, which also catches hard links.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b))
            && ma.dev() == mb.dev()
            && ma.ino() == mb.ino()
        {
            return true;
        }
    }
    matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y)
}

/// Refuses an `output` (named `flag` in the message) that is the same file as one of `inputs`.
pub fn not_an_input(flag: &str, output: &Path, inputs: &[&Path]) -> Result<()> {
    if let Some(input) = inputs.iter().find(|input| same_file(output, input)) {
        bail!(
            "{flag} {} is the input {}: refusing to overwrite it (choose another output path)",
            output.display(),
            input.display()
        );
    }
    Ok(())
}

/// Refuses an `output` (named `flag` in the message) inside one of the input folders `inputs`
/// (a run folder, a dataset): a command that reads them leaves them as they were.
pub fn not_inside(flag: &str, output: &Path, inputs: &[&Path]) -> Result<()> {
    // The output's deepest existing ancestor, resolved, with the rest of the path after it.
    let absolute = std::path::absolute(output)?;
    let Some((base, rest)) = absolute
        .ancestors()
        .find_map(|a| Some((a.canonicalize().ok()?, absolute.strip_prefix(a).ok()?)))
    else {
        return Ok(());
    };
    let out = base.join(rest);
    for input in inputs {
        if let Some(folder) = resolved(input)
            && folder.is_dir()
            && out.starts_with(&folder)
        {
            bail!(
                "{flag} {} lies inside the input {}: refusing to write into it (choose an \
                 output outside it)",
                output.display(),
                input.display()
            );
        }
    }
    Ok(())
}

/// The memory this machine can still give (Linux: `MemAvailable` of `/proc/meminfo`), bytes;
/// `None` where it cannot be read.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses an operation (`what`) that needs `needed` bytes of host memory when this machine has
/// less available, before anything is allocated.
pub fn fits_in_memory(what: &str, needed: u128) -> Result<()> {
    let gb = |bytes: u128| bytes as f64 / 1e9;
    if let Some(available) = available_memory()
        && needed > u128::from(available)
    {
        bail!(
            "{what} needs about {:.1} GB of memory and this machine has {:.1} GB available",
            gb(needed),
            gb(u128::from(available))
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_through_dot_dot_or_a_link_is_its_input() {
        let dir = std::env::temp_dir().join(format!("ember-guard-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).expect("scratch folder");
        let input = dir.join("in.ply");
        std::fs::write(&input, b"ply").expect("input file");
        assert!(not_an_input("--out", &dir.join("sub/../in.ply"), &[&input]).is_err());
        let link = dir.join("link.ply");
        std::fs::hard_link(&input, &link).expect("hard link");
        assert!(not_an_input("--out", &link, &[&input]).is_err());
        assert!(not_an_input("--out", &dir.join("new.png"), &[&input]).is_ok());
        assert!(not_an_input("--out", &dir.join("missing/x.png"), &[&input]).is_ok());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn more_than_the_machine_has_is_refused() {
        assert!(fits_in_memory("a test", 1).is_ok());
        if available_memory().is_none() {
            println!("skipped: this system has no /proc/meminfo");
            return;
        }
        let message = fits_in_memory("a test", u128::MAX).unwrap_err().to_string();
        assert!(message.contains("a test needs about"), "{message}");
    }
}
