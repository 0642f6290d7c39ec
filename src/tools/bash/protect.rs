//! What a sandboxed command may not change, though it lies in the workspace it
//! may write: what git will later run for the person (the repository's config,
//! hooks and `info/`, its submodules' and worktrees' config and pointers), and
//! the files that configure agents, editors and shells (`.claude/`, `.mcp.json`,
//! `orchestrate.toml`, `agents/`, `.envrc`, `.vscode/`, `.idea/`, `.husky/`,
//! `CLAUDE.md`, `AGENTS.md`). What ordinary git work writes (`objects/`,
//! `refs/`, `logs/`, `index`, `HEAD`, `packed-refs`, `*_HEAD`) stays writable.
//!
//! `pinned` folders are bound onto themselves (so none can be renamed away and
//! replaced); `read_only` paths are bound read-only. Only what exists is
//! listed: a command may still make a new `.envrc`, but not change one.

use std::path::{Path, PathBuf};

use crate::tools::protected::PROTECTED;

/// What a repository's git folder holds that git will later run or follow.
const GIT_RUNS: [&str; 6] = [
    "config",
    "hooks",
    "info",
    "config.worktree",
    "gitdir",
    "commondir",
];

/// Git folders looked into at most (submodules of submodules, worktrees).
const MAX_GIT_DIRS: usize = 256;

/// The paths a command in `workspace` gets read-only, and the folders pinned in
/// place first.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Protected {
    /// Bound onto themselves, writable: they cannot be renamed away.
    pub(super) pinned: Vec<PathBuf>,
    /// Bound read-only.
    pub(super) read_only: Vec<PathBuf>,
}

/// What `workspace` (canonical) has that commands may not change.
pub(super) fn protected(workspace: &Path) -> Protected {
    let mut found = Protected::default();
    for name in PROTECTED {
        let path = workspace.join(name);
        if exists(&path) {
            found.read_only.push(path);
        }
    }
    // The repository the workspace is in: its own folder or the nearest above.
    let Some(top) = workspace.ancestors().find(|dir| exists(&dir.join(".git"))) else {
        return found;
    };
    let dot_git = top.join(".git");
    let mut git_dirs = Vec::new();
    if dot_git.is_dir() {
        found.pinned.push(dot_git.clone());
        git_dirs.push(dot_git);
    } else {
        // A worktree or a submodule: `.git` is a file naming the git folder.
        found.read_only.push(dot_git.clone());
        git_dirs.extend(pointed(&dot_git, "gitdir: "));
    }
    let mut i = 0;
    while let Some(dir) = git_dirs.get(i).cloned() {
        i += 1;
        if git_dirs.len() > MAX_GIT_DIRS {
            break;
        }
        for name in GIT_RUNS {
            let path = dir.join(name);
            if exists(&path) && !found.read_only.contains(&path) {
                found.read_only.push(path);
            }
        }
        // The common folder a worktree's folder points to, and the folders of
        // submodules and worktrees within.
        let common = pointed(&dir.join("commondir"), "");
        for folder in common.iter().chain(std::iter::once(&dir)) {
            if folder != &dir && !git_dirs.contains(folder) {
                git_dirs.push(folder.clone());
            }
            for nested in ["modules", "worktrees"] {
                let Ok(entries) = std::fs::read_dir(folder.join(nested)) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_dir() && !git_dirs.contains(&path) {
                        git_dirs.push(path);
                    }
                }
            }
        }
    }
    found
}

/// Whether anything is at `path` (a link counts, unfollowed).
fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The folder a git pointer file names (`gitdir: PATH`, or a `commondir` of
/// one line), relative to the file's folder, made canonical.
fn pointed(file: &Path, prefix: &str) -> Option<PathBuf> {
    let text = crate::small_file::read_to_string(file, 4096).ok()?;
    let named = text.lines().next()?.strip_prefix(prefix)?.trim();
    let path = file.parent()?.join(named);
    path.canonicalize().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_git_will_run_and_what_configures_agents_is_found_and_the_rest_of_git_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        for folder in [
            ".git/hooks",
            ".git/info",
            ".git/objects",
            ".git/refs",
            ".git/modules/sub/hooks",
            ".claude",
            "agents",
        ] {
            std::fs::create_dir_all(ws.join(folder)).unwrap();
        }
        for file in [
            ".git/config",
            ".git/HEAD",
            ".git/index",
            ".git/modules/sub/config",
            ".mcp.json",
            "CLAUDE.md",
        ] {
            std::fs::write(ws.join(file), "x").unwrap();
        }
        let found = protected(&ws);
        assert_eq!(found.pinned, [ws.join(".git")]);
        let mut read_only: Vec<String> = found
            .read_only
            .iter()
            .map(|p| p.strip_prefix(&ws).unwrap().display().to_string())
            .collect();
        read_only.sort();
        assert_eq!(
            read_only,
            [
                ".claude",
                ".git/config",
                ".git/hooks",
                ".git/info",
                ".git/modules/sub/config",
                ".git/modules/sub/hooks",
                ".mcp.json",
                "CLAUDE.md",
                "agents",
            ]
        );
    }

    #[test]
    fn a_worktree_protects_its_pointers_and_the_common_repository() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let main = root.join("main/.git");
        let linked = main.join("worktrees/feature");
        std::fs::create_dir_all(main.join("hooks")).unwrap();
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(main.join("config"), "x").unwrap();
        std::fs::write(linked.join("commondir"), "../..\n").unwrap();
        std::fs::write(linked.join("gitdir"), "x").unwrap();
        std::fs::write(linked.join("config.worktree"), "x").unwrap();
        let ws = root.join("feature");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join(".git"), format!("gitdir: {}\n", linked.display())).unwrap();
        let found = protected(&ws);
        for path in [
            ws.join(".git"),
            linked.join("commondir"),
            linked.join("gitdir"),
            linked.join("config.worktree"),
            main.join("config"),
            main.join("hooks"),
        ] {
            assert!(
                found.read_only.contains(&path),
                "{} in {:?}",
                path.display(),
                found.read_only
            );
        }
    }
}
