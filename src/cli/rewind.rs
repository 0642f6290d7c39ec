//! `orchestrate rewind [RUN] [--to N] [--force]`: the workspace put back as a
//! run's checkpoint holds it (by default the latest run's first: before it
//! changed anything). The present state is checkpointed first, so a rewind
//! can be undone; changes made after the run's last checkpoint are not
//! overwritten unless `--force`.

use std::io::Write;
use std::process::ExitCode;

use super::exit;
use super::flags::Cli;
use super::setup;
use crate::git::checkout::{self, CheckoutError};
use crate::git::checkpoint::{self, Checkpoint, outside};
use crate::runs::{self, RunStatus};

/// Why a rewind was not done.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("{0}")]
    Said(String),
    #[error(transparent)]
    Git(#[from] CheckoutError),
}

/// Runs `orchestrate rewind`.
pub(super) fn run(
    cli: &Cli,
    id: Option<&str>,
    to: Option<u32>,
    force: bool,
    env: &impl Fn(&str) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let Some((workspace, state)) = setup::state_or_say(cli, env, err) else {
        return ExitCode::from(exit::USAGE);
    };
    let run = match runs::find(&state, id) {
        Ok(run) => run,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    if run.status == RunStatus::Running {
        let _ = writeln!(
            err,
            "orchestrate: run {} is running; stop it (`orchestrate kill`) before rewinding it",
            run.id
        );
        return ExitCode::from(exit::FAILED);
    }
    rewind_run(workspace, &state, run.id, to, force, out, err)
}

/// Puts `workspace` back as run `run`'s checkpoint `to` (its first by
/// default) holds it; the run is not running, or it is this process's own
/// with no agent working (an interactive session's `/rewind`).
pub(super) fn rewind_run(
    workspace: std::path::PathBuf,
    state: &crate::state::StateDir,
    run: crate::protocol::SessionId,
    to: Option<u32>,
    force: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let leave_out: Vec<_> = state
        .private()
        .into_iter()
        .map(|p| p.canonicalize().unwrap_or(p))
        .collect();
    let copies = state.dir().join("checkpoints").join(run.to_string());
    let rewound = match checkout::place(&workspace) {
        Err(CheckoutError::NoRepository(_)) => {
            let workspace = workspace.canonicalize().unwrap_or(workspace);
            rewind_outside(&workspace, &copies, run, to, force)
        }
        Err(e) => Err(Refused::Git(e)),
        Ok(place) => rewind(&place, &state.scratch(), &leave_out, run, to, force),
    };
    match rewound {
        Ok(said) => {
            let _ = writeln!(out, "{said}");
            ExitCode::from(exit::DONE)
        }
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// Refuses a rewind over `newer`, files changed after the run's last
/// checkpoint, unless `force`.
fn refuse_newer(mut newer: Vec<String>, force: bool) -> Result<(), Refused> {
    newer.sort();
    if newer.is_empty() || force {
        return Ok(());
    }
    Err(Refused::Said(format!(
        "{} changed after the run's last checkpoint; rewinding would lose that (--force rewinds anyway)",
        newer.join(", ")
    )))
}

/// Outside a repository: puts back the files checkpoint `to` (default: the
/// first) of `run` copied in `copies`; what was done, in a line.
fn rewind_outside(
    workspace: &std::path::Path,
    copies: &std::path::Path,
    run: crate::protocol::SessionId,
    to: Option<u32>,
    force: bool,
) -> Result<String, Refused> {
    let taken: Vec<u32> = (1..)
        .take_while(|n| outside::folder(copies, *n).join("manifest.jsonl").exists())
        .collect();
    let Some(&last) = taken.last() else {
        return Err(Refused::Said(format!(
            "run {run} took no checkpoint of this workspace: its file tools changed nothing here"
        )));
    };
    let n = to.unwrap_or(1);
    if !taken.contains(&n) {
        return Err(Refused::Said(format!(
            "run {run} has no checkpoint {n}; it has 1 to {last}"
        )));
    }
    let target = outside::folder(copies, n);
    let paths: Vec<_> = outside::manifest(&target)
        .into_iter()
        .map(|s| s.path)
        .collect();
    let newer: Vec<String> = outside::changed_since_end(&outside::folder(copies, last), workspace)
        .into_iter()
        .filter(|p| paths.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    refuse_newer(newer, force)?;
    let io = |e: std::io::Error| Refused::Said(format!("the rewind stopped: {e}"));
    let undo = last + 1;
    let undo_dir = outside::folder(copies, undo);
    let mut held = outside::Held::read(&undo_dir);
    for path in &paths {
        outside::save(&undo_dir, workspace, &workspace.join(path), &mut held).map_err(io)?;
    }
    let done = outside::restore(&target, workspace).map_err(|e| {
        Refused::Said(format!(
            "the rewind stopped part way: {e}; `orchestrate rewind {run} --to {undo}` puts back what it changed"
        ))
    })?;
    outside::end(&undo_dir, workspace).map_err(io)?;
    Ok(format!(
        "rewound to checkpoint {n} of run {run}: {} files put back (outside git a checkpoint holds only what the file tools changed, not what commands did); `orchestrate rewind {run} --to {undo}` undoes it",
        done.len()
    ))
}

/// Puts the workspace (at `place` in its repository) back as checkpoint `to`
/// (default: the first) of `run` holds it; what was done, in a line.
fn rewind(
    place: &checkout::Place,
    scratch: &std::path::Path,
    leave_out: &[std::path::PathBuf],
    run: crate::protocol::SessionId,
    to: Option<u32>,
    force: bool,
) -> Result<String, Refused> {
    let root = place.root.canonicalize().map_err(CheckoutError::Io)?;
    // Only the workspace's own part of its repository.
    let prefix: std::path::PathBuf = place.prefix.components().collect();
    let points = checkpoint::list(&root, run)?;
    let Some(last) = points.last() else {
        return Err(Refused::Said(format!(
            "run {run} took no checkpoint of this workspace: it changed nothing here"
        )));
    };
    let target: &Checkpoint = match to {
        None => &points[0],
        Some(n) => points.iter().find(|c| c.n == n).ok_or_else(|| {
            let known: Vec<String> = points
                .iter()
                .map(|c| format!("{} ({})", c.n, c.label))
                .collect();
            Refused::Said(format!(
                "run {run} has no checkpoint {n}; it has {}",
                known.join(", ")
            ))
        })?,
    };
    let present = checkout::snapshot_without(&root, scratch, leave_out)?;
    let gitlink = |b: &Option<checkout::Blob>| b.as_ref().is_some_and(|b| b.mode == "160000");
    let (changes, nested): (Vec<_>, Vec<_>) = checkout::changed(&root, &present, &target.commit)?
        .into_iter()
        .filter(|c| c.path.starts_with(&prefix))
        .partition(|c| !gitlink(&c.before) && !gitlink(&c.after));
    if changes.is_empty() {
        return Ok(format!(
            "the workspace is already as checkpoint {} ({}) holds it",
            target.n, target.label
        ));
    }
    // What changed since the run's last checkpoint and the rewind would undo.
    let since: Vec<_> = checkout::changed(&root, &last.commit, &present)?
        .into_iter()
        .map(|c| c.path)
        .collect();
    let newer: Vec<String> = changes
        .iter()
        .filter(|c| since.contains(&c.path))
        .map(|c| c.path.display().to_string())
        .collect();
    refuse_newer(newer, force)?;
    let undo = checkpoint::take(
        &root,
        run,
        &format!("before rewinding to {}", target.n),
        scratch,
        leave_out,
    )?;
    if let Err(e) = checkpoint::restore(&root, &target.commit, &changes, scratch) {
        return Err(Refused::Said(format!(
            "the rewind stopped part way: {e}; `orchestrate rewind {run} --to {}` puts back what it changed",
            undo.n
        )));
    }
    checkpoint::take(
        &root,
        run,
        &format!("after rewinding to {}", target.n),
        scratch,
        leave_out,
    )?;
    let removed = changes.iter().filter(|c| c.after.is_none()).count();
    let mut said = format!(
        "rewound to checkpoint {} of run {run} ({}): {} files restored, {removed} removed; `orchestrate rewind {run} --to {}` undoes it",
        target.n,
        target.label,
        changes.len() - removed,
        undo.n
    );
    if !nested.is_empty() {
        let names: Vec<String> = nested
            .iter()
            .map(|c| c.path.display().to_string())
            .collect();
        said.push_str(&format!(
            "\nleft as they are (repositories inside the workspace): {}",
            names.join(", ")
        ));
    }
    Ok(said)
}
