//! What a run's isolated sub-agents left: the branches of work not merged,
//! the checkouts still on disk, the disk a run takes; and `sessions prune`,
//! which removes the branches and checkouts of old runs.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::git::checkout;
use crate::isolation::steps;
use crate::protocol::Changes;
use crate::runs::{Run, RunStatus};
use crate::state::StateDir;

/// Bytes under `path`, links not followed.
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| size_of(&entry.path()))
        .sum()
}

/// The run's checkpoints of `workspace`, its branches left for the person, its
/// checkouts still on disk, and the disk it takes (journals and checkouts);
/// empty lines left out.
pub(super) fn section(run: &Run, state: &StateDir, workspace: &Path) -> String {
    let mut text = String::new();
    let root = checkout::place(workspace).ok().map(|p| p.root);
    let points = root
        .and_then(|root| crate::git::checkpoint::list(&root, run.id).ok())
        .unwrap_or_default();
    for point in points {
        text.push_str(&format!(
            "checkpoint {}: {} ({})\n",
            point.n,
            point.label,
            &point.commit[..point.commit.len().min(12)]
        ));
    }
    // Outside a repository: copies of what the file tools changed.
    let copies = state.dir().join("checkpoints").join(run.id.to_string());
    for n in 1.. {
        let dir = crate::git::checkpoint::outside::folder(&copies, n);
        if !dir.join("manifest.jsonl").exists() {
            break;
        }
        let files = crate::git::checkpoint::outside::manifest(&dir).len();
        let what = if n == 1 {
            "before the run's file tools changed them"
        } else {
            "before a rewind"
        };
        text.push_str(&format!(
            "checkpoint {n}: copies of {files} files, {what}\n"
        ));
    }
    for agent in &run.agents {
        if let Some(branch) = agent.changes.as_ref().and_then(Changes::left_on) {
            let why = match &agent.changes {
                Some(Changes::Conflict { files, .. }) => {
                    format!("conflict in {}", files.join(", "))
                }
                _ => "not merged".to_owned(),
            };
            text.push_str(&format!("branch {branch}: {} ({why})\n", agent.role));
        }
    }
    let journals: u64 = run
        .agents
        .iter()
        .map(|a| size_of(&state.journal(a.session)))
        .sum();
    let mut checkouts = 0;
    for agent in run.agents.iter().filter(|a| !a.checkout_removed) {
        if let Some(checkout) = &agent.checkout
            && checkout.root.exists()
        {
            let bytes = size_of(&checkout.root);
            checkouts += bytes;
            text.push_str(&format!(
                "checkout {} ({}): {}\n",
                checkout.root.display(),
                agent.role,
                kib(bytes)
            ));
        }
    }
    text.push_str(&format!(
        "disk: {} (journals {}, checkouts {})\n",
        kib(journals + checkouts),
        kib(journals),
        kib(checkouts)
    ));
    text
}

fn kib(bytes: u64) -> String {
    match bytes {
        b if b >= 10 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b.div_ceil(1024)),
    }
}

/// Removes the branches and checkouts of the runs in `runs` that started
/// more than `age` ago and are not running, the refs remote sub-agents left
/// as old, and the folders in `state`'s checkouts that no journal names (a
/// checkout whose sub-agent never started) as old; one line for each thing
/// removed.
pub(super) fn prune(
    runs: &[Run],
    state: &StateDir,
    workspace: &Path,
    age: Duration,
    now: SystemTime,
) -> Vec<String> {
    let mut said = Vec::new();
    let top = checkout::place(workspace).ok().map(|p| p.root);
    let old = |time: SystemTime| now.duration_since(time).is_ok_and(|d| d > age);
    let named: Vec<&Path> = runs
        .iter()
        .flat_map(|r| &r.agents)
        .filter_map(|a| a.checkout.as_ref())
        .map(|c| c.root.as_path())
        .collect();
    for run in runs {
        if !old(run.started) || run.status == RunStatus::Running {
            continue;
        }
        if let Some(top) = &top {
            match crate::git::checkpoint::forget(top, run.id) {
                Ok(0) => {}
                Ok(n) => said.push(format!("deleted {n} checkpoints of run {}", run.id)),
                Err(e) => said.push(format!("{}: {e}", top.display())),
            }
        }
        for agent in &run.agents {
            let Some(checkout) = agent.checkout.as_ref().filter(|c| !c.borrowed) else {
                continue;
            };
            if checkout.root.exists() {
                match steps::remove(checkout) {
                    Ok(()) => said.push(format!("removed checkout {}", checkout.root.display())),
                    Err(e) => {
                        said.push(format!("could not remove {}: {e}", checkout.root.display()))
                    }
                }
            }
            let exists = checkout::branch_exists(&checkout.into, &checkout.branch);
            if exists {
                match checkout::delete_branch(&checkout.into, &checkout.branch) {
                    Ok(()) => said.push(format!("deleted branch {}", checkout.branch)),
                    Err(e) => said.push(format!("{}: {e}", checkout.into.display())),
                }
            }
        }
    }
    // What a sub-agent on a worker left when its work could not be brought
    // back (nothing of it is journaled here): its fetched work, and the
    // snapshot it was sent, pinned; each named by its session, whose id
    // tells when it began.
    if let Some(top) = &top {
        let left = crate::git::bundle::refs_below(
            top,
            &["refs/orchestrate/remote/", "refs/orchestrate/snapshots/"],
        );
        for name in left.unwrap_or_default() {
            let id = name.rsplit('/').next().unwrap_or_default();
            let Ok(session) = id.parse::<crate::protocol::SessionId>() else {
                continue;
            };
            let began = std::time::UNIX_EPOCH + Duration::from_millis(session.timestamp_millis());
            // A local checkout's pin goes with its checkout, above.
            let local = state.checkout(session).exists()
                || named
                    .iter()
                    .any(|root| root.file_name() == Some(id.as_ref()));
            if old(began) && !local {
                crate::git::bundle::delete_ref(top, &name);
                said.push(format!("deleted ref {name}"));
            }
        }
    }
    let folders = std::fs::read_dir(state.checkouts())
        .into_iter()
        .flatten()
        .flatten();
    for folder in folders {
        let path = folder.path();
        let unnamed = path.file_name().is_some_and(|n| n != ".scratch")
            && !named
                .iter()
                .any(|root| root.file_name() == path.file_name());
        let made = folder.metadata().and_then(|m| m.modified());
        if unnamed && made.is_ok_and(old) && steps::remove_tree(&path).is_ok() {
            said.push(format!("removed checkout {}", path.display()));
        }
    }
    said
}
