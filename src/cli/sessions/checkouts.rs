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

/// The run's branches left for the person, its checkouts still on disk, and
/// the disk it takes (journals and checkouts); empty lines left out.
pub(super) fn section(run: &Run, state: &StateDir) -> String {
    let mut text = String::new();
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
/// more than `age` ago and are not running; one line for each thing removed.
pub(super) fn prune(runs: &[Run], age: Duration, now: SystemTime) -> Vec<String> {
    let mut said = Vec::new();
    for run in runs {
        let old = now.duration_since(run.started).is_ok_and(|d| d > age);
        if !old || run.status == RunStatus::Running {
            continue;
        }
        let prefix = format!("orchestrate/{}/", &run.id.to_string()[..8]);
        let mut repositories: Vec<&Path> = Vec::new();
        for checkout in run.agents.iter().filter_map(|a| a.checkout.as_ref()) {
            if checkout.root.exists() {
                match steps::remove(checkout) {
                    Ok(()) => said.push(format!("removed checkout {}", checkout.root.display())),
                    Err(e) => {
                        said.push(format!("could not remove {}: {e}", checkout.root.display()))
                    }
                }
            }
            if !repositories.contains(&checkout.into.as_path()) {
                repositories.push(&checkout.into);
            }
        }
        for repository in repositories {
            match checkout::delete_branches(repository, &prefix) {
                Ok(deleted) => said.extend(deleted.iter().map(|b| format!("deleted branch {b}"))),
                Err(e) => said.push(format!("{}: {e}", repository.display())),
            }
        }
    }
    said
}
