//! The changes a comparison of a folder found, as the file changes events tell:
//! a unified diff per file (a line for a binary, a submodule or a file too
//! large to read), or past [`MAX_TOLD`] files one change naming how many and
//! the folder that holds them all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::git::checkout::PathChange;
use crate::protocol::CallRef;
use crate::tools::FileChange;

/// The most files one comparison tells one by one.
pub(crate) const MAX_TOLD: usize = 50;

/// The largest file whose content is read for a diff.
pub(crate) const MAX_READ: u64 = crate::tools::MAX_DIFF_BYTES as u64;

/// A link to another repository's commit (a submodule): no blob to read.
const GITLINK: &str = "160000";

/// The blobs a comparison's diffs need: both sides of each change, but
/// submodules'; none past [`MAX_TOLD`] changes.
pub(super) fn wanted(changes: &[PathChange]) -> Vec<&str> {
    if changes.len() > MAX_TOLD {
        return Vec::new();
    }
    changes
        .iter()
        .flat_map(|c| [&c.before, &c.after])
        .flatten()
        .filter(|b| b.mode != GITLINK)
        .map(|b| b.oid.as_str())
        .collect()
}

/// `changes` as file changes, with `blobs` their content (`None`: too large
/// to read), seen while `calls` ran (told only when several did).
pub(super) fn told(
    changes: &[PathChange],
    blobs: &HashMap<String, Option<Vec<u8>>>,
    calls: &[CallRef],
) -> Vec<FileChange> {
    let calls = if calls.len() > 1 {
        calls.to_vec()
    } else {
        Vec::new()
    };
    let change = |path: String, diff: String, created: bool, count: Option<usize>| FileChange {
        path,
        diff,
        created,
        compared: true,
        calls: calls.clone(),
        count,
    };
    if changes.len() > MAX_TOLD {
        let folder = common_folder(changes.iter().map(|c| c.path.as_path()));
        let shown = match folder.as_os_str().is_empty() {
            true => ".".to_owned(),
            false => folder.to_string_lossy().into_owned(),
        };
        return vec![change(shown, String::new(), false, Some(changes.len()))];
    }
    changes
        .iter()
        .map(|c| {
            let shown = c.path.to_string_lossy().into_owned();
            let diff = diff(&shown, c, blobs);
            change(shown, diff, c.before.is_none(), None)
        })
        .collect()
}

/// One change's diff.
fn diff(shown: &str, change: &PathChange, blobs: &HashMap<String, Option<Vec<u8>>>) -> String {
    let (before, after) = (change.before.as_ref(), change.after.as_ref());
    if before.is_some_and(|b| b.mode == GITLINK) || after.is_some_and(|b| b.mode == GITLINK) {
        let short = |b: Option<&crate::git::checkout::Blob>| {
            b.and_then(|b| b.oid.get(..12)).unwrap_or("none").to_owned()
        };
        return format!(
            "[submodule {shown}: {} -> {}]\n",
            short(before),
            short(after)
        );
    }
    if let (Some(b), Some(a)) = (before, after)
        && b.oid == a.oid
    {
        return format!("old mode {}\nnew mode {}\n", b.mode, a.mode);
    }
    let content = |b: Option<&crate::git::checkout::Blob>| match b {
        None => Some(Some(Vec::new())),
        Some(b) => blobs.get(&b.oid).cloned(),
    };
    let (Some(Some(old)), Some(Some(new))) = (content(before), content(after)) else {
        return format!(
            "[diff of {shown} not shown: it is larger than {} KiB]\n",
            MAX_READ / 1024
        );
    };
    match (text(&old), text(&new)) {
        (Some(old), Some(new)) => crate::tools::unified_diff(shown, old, new),
        _ => {
            let side = |b: Option<_>, name: &str| match b {
                Some(_) => format!("{name}/{shown}"),
                None => "/dev/null".to_owned(),
            };
            format!(
                "Binary files {} and {} differ\n",
                side(before, "a"),
                side(after, "b")
            )
        }
    }
}

/// `bytes` as text, unless they are binary (as the file tools judge) or not
/// UTF-8.
fn text(bytes: &[u8]) -> Option<&str> {
    if crate::tools::files::is_binary(bytes) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// The deepest folder that holds every one of `paths` (empty: the top).
fn common_folder<'a>(mut paths: impl Iterator<Item = &'a Path>) -> PathBuf {
    let Some(first) = paths.next() else {
        return PathBuf::new();
    };
    let mut common: PathBuf = first.parent().unwrap_or(Path::new("")).to_owned();
    for path in paths {
        while !path.starts_with(&common) {
            if !common.pop() {
                break;
            }
        }
    }
    common
}

#[cfg(test)]
mod tests;
