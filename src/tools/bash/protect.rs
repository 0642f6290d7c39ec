//! What a sandboxed command may not change, though it lies in the workspace it
//! may write: what git will later run for the person (the repository's config,
//! hooks and `info/`, the folder `core.hooksPath` names and the files its config
//! includes, its submodules' and worktrees' folders, config and pointers), and
//! the files that configure agents, editors and shells (`.claude/`,
//! `.mcp.json`, `orchestrate.toml`, `agents/`, `.envrc`, `.vscode/`, `.idea/`,
//! `.husky/`, `CLAUDE.md`, `AGENTS.md`). What ordinary git work writes
//! (`objects/`, `refs/`, `logs/`, `index`, `HEAD`, `packed-refs`, `*_HEAD`)
//! stays writable.
//!
//! `placeholders` are made first where git would look but nothing is yet (an
//! empty `hooks/`, `info/`, `modules/`, `worktrees/`, the hooks folder
//! `core.hooksPath` names, an included file, a `config.worktree` the
//! repository reads), so that a command cannot make them; `pinned` folders are
//! bound onto themselves (none can be renamed away and replaced); `read_only`
//! paths are bound read-only. The agents' and editors' files are protected
//! where they exist; one a command makes is the launcher's to take back.

use std::path::{Path, PathBuf};

use crate::git::config::pointers;
use crate::tools::protected::PROTECTED;

/// What a repository's git folder holds that git will later run or follow.
const GIT_RUNS: [&str; 4] = ["config", "config.worktree", "gitdir", "commondir"];

/// Folders of a git folder that git runs from or reads config from: made when
/// missing.
const GIT_FOLDERS: [&str; 2] = ["hooks", "info"];

/// Folders of a git folder holding more git folders (submodules, worktrees):
/// each of those is pinned, the folder itself read-only.
const NESTED: [&str; 2] = ["modules", "worktrees"];

/// Git folders looked into at most (submodules of submodules, worktrees).
const MAX_GIT_DIRS: usize = 256;

/// Config files (included ones too) read at most.
const MAX_CONFIGS: usize = 64;

/// The paths a command in `workspace` gets read-only, what is made first, and
/// the folders pinned in place.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Protected {
    /// Missing: made first (a folder when `true`, else an empty file), then
    /// bound read-only with the rest.
    pub(super) placeholders: Vec<(PathBuf, bool)>,
    /// Bound onto themselves, writable: they cannot be renamed away.
    pub(super) pinned: Vec<PathBuf>,
    /// Bound read-only, in this order (a folder's pinned children first).
    pub(super) read_only: Vec<PathBuf>,
}

impl Protected {
    fn read_only(&mut self, path: PathBuf) {
        if !self.read_only.contains(&path) {
            self.read_only.push(path);
        }
    }

    /// `path` read-only, made first as a folder or a file when missing.
    fn made_read_only(&mut self, path: PathBuf, folder: bool) {
        if !exists(&path) && !self.placeholders.iter().any(|(p, _)| p == &path) {
            self.placeholders.push((path.clone(), folder));
        }
        self.read_only(path);
    }
}

/// What `workspace` (canonical) has that commands may not change; `home` is
/// where a config's `~/` leads.
pub(super) fn protected(workspace: &Path, home: Option<&Path>) -> Protected {
    let mut found = Protected::default();
    for name in PROTECTED {
        let path = workspace.join(name);
        if exists(&path) {
            found.read_only(path);
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
        found.read_only(dot_git.clone());
        git_dirs.extend(pointed(&dot_git, "gitdir: "));
    }
    let mut configs = Vec::new();
    let mut i = 0;
    while let Some(dir) = git_dirs.get(i).cloned() {
        i += 1;
        if git_dirs.len() > MAX_GIT_DIRS {
            break;
        }
        for name in GIT_RUNS {
            let path = dir.join(name);
            if exists(&path) {
                found.read_only(path);
            }
        }
        for name in GIT_FOLDERS {
            found.made_read_only(dir.join(name), true);
        }
        for name in ["config", "config.worktree"] {
            if exists(&dir.join(name)) {
                configs.push(dir.join(name));
            }
        }
        // The common folder a worktree's folder points to.
        if let Some(common) = pointed(&dir.join("commondir"), "")
            && !git_dirs.contains(&common)
        {
            git_dirs.push(common);
        }
        // Submodules' and worktrees' folders: pinned, in a folder no command
        // can add to.
        for nested in NESTED {
            let folder = dir.join(nested);
            if let Ok(entries) = std::fs::read_dir(&folder) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_dir() && !git_dirs.contains(&path) {
                        found.pinned.push(path.clone());
                        git_dirs.push(path);
                    }
                }
            }
            found.made_read_only(folder, true);
        }
    }
    follow_configs(workspace, top, home, configs, &git_dirs, &mut found);
    found
}

/// What the config files say: the hooks folder `core.hooksPath` names (from the
/// worktree's top), the files they include (from their own folder), each
/// protected (made first when missing in the workspace); a `config.worktree`
/// for every git folder once the repository reads them.
fn follow_configs(
    workspace: &Path,
    top: &Path,
    home: Option<&Path>,
    mut configs: Vec<PathBuf>,
    git_dirs: &[PathBuf],
    found: &mut Protected,
) {
    let resolve = |written: &str, from: &Path| -> Option<PathBuf> {
        match written.strip_prefix("~/") {
            Some(rest) => Some(home?.join(rest)),
            None => Some(from.join(written)),
        }
    };
    let mut worktree_config = false;
    let mut i = 0;
    while let Some(config) = configs.get(i).cloned() {
        i += 1;
        if i > MAX_CONFIGS {
            break;
        }
        let Ok(text) = crate::small_file::read_to_string(&config, 1 << 20) else {
            continue;
        };
        let said = pointers(&text);
        worktree_config |= said.worktree_config;
        for hooks in &said.hooks_paths {
            if let Some(path) = resolve(hooks, top) {
                protect_pointed(workspace, &path, true, found);
            }
        }
        let folder = config.parent().unwrap_or(top).to_owned();
        for include in &said.includes {
            if let Some(path) = resolve(include, &folder) {
                if exists(&path) && !configs.contains(&path) {
                    configs.push(path.clone());
                }
                protect_pointed(workspace, &path, false, found);
            }
        }
    }
    if worktree_config {
        for dir in git_dirs {
            found.made_read_only(dir.join("config.worktree"), false);
        }
    }
}

/// A path a config points to: read-only where it is; made first when it is
/// missing in the workspace (elsewhere a command cannot make it).
fn protect_pointed(workspace: &Path, path: &Path, folder: bool, found: &mut Protected) {
    let path = crate::tools::rules::normalized(path);
    if exists(&path) {
        found.read_only(path);
    } else if path.starts_with(workspace) {
        found.made_read_only(path, folder);
    }
}

/// The protected names at `workspace`'s root that exist now.
pub(super) fn present(workspace: &Path) -> Vec<&'static str> {
    (PROTECTED.into_iter())
        .filter(|name| exists(&workspace.join(name)))
        .collect()
}

/// Moves aside each protected path at `workspace`'s root that a command made
/// (it was not among `before`): `CLAUDE.md` becomes `CLAUDE.md.from-command`
/// (numbered when that is taken), so that what it configures is not in force
/// and nothing is lost. Returns what moved where, as names.
pub(super) fn set_aside(workspace: &Path, before: &[&str]) -> Vec<(String, String)> {
    let mut moved = Vec::new();
    for name in PROTECTED {
        let path = workspace.join(name);
        if before.contains(&name) || !exists(&path) {
            continue;
        }
        let free = (0..100)
            .map(|n| match n {
                0 => format!("{name}.from-command"),
                n => format!("{name}.from-command.{n}"),
            })
            .find(|aside| !exists(&workspace.join(aside)));
        let Some(aside) = free else {
            continue;
        };
        // `renameat2(NOREPLACE)`: a name taken meanwhile is not overwritten.
        let renamed = rustix::fs::renameat_with(
            rustix::fs::CWD,
            &path,
            rustix::fs::CWD,
            workspace.join(&aside),
            rustix::fs::RenameFlags::NOREPLACE,
        );
        if renamed.is_ok() {
            moved.push((name.to_owned(), aside));
        }
    }
    moved
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
        let found = protected(&ws, None);
        assert_eq!(found.pinned, [ws.join(".git"), ws.join(".git/modules/sub")]);
        let relative = |paths: Vec<&PathBuf>| -> Vec<String> {
            let mut names: Vec<String> = (paths.into_iter())
                .map(|p| p.strip_prefix(&ws).unwrap().display().to_string())
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            relative(found.read_only.iter().collect()),
            [
                ".claude",
                ".git/config",
                ".git/hooks",
                ".git/info",
                ".git/modules",
                ".git/modules/sub/config",
                ".git/modules/sub/hooks",
                ".git/modules/sub/info",
                ".git/modules/sub/modules",
                ".git/modules/sub/worktrees",
                ".git/worktrees",
                ".mcp.json",
                "CLAUDE.md",
                "agents",
            ]
        );
        // What git would look for and is missing is made first.
        assert_eq!(
            relative(found.placeholders.iter().map(|(p, _)| p).collect()),
            [
                ".git/modules/sub/info",
                ".git/modules/sub/modules",
                ".git/modules/sub/worktrees",
                ".git/worktrees",
            ]
        );
        assert!(found.placeholders.iter().all(|(_, folder)| *folder));
    }

    #[test]
    fn a_hooks_path_and_included_config_are_followed_and_made_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(
            ws.join(".git/config"),
            "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../.gitconfig\n[extensions]\n\tworktreeConfig = true\n",
        )
        .unwrap();
        std::fs::write(
            ws.join(".gitconfig"),
            "[include]\n\tpath = tools/more.config\n",
        )
        .unwrap();
        let found = protected(&ws, None);
        let made: Vec<(PathBuf, bool)> = found.placeholders.clone();
        for (path, folder) in [
            (ws.join(".githooks"), true),
            (ws.join("tools/more.config"), false),
            (ws.join(".git/config.worktree"), false),
        ] {
            assert!(
                made.contains(&(path.clone(), folder)),
                "{path:?} in {made:?}"
            );
            assert!(found.read_only.contains(&path));
        }
        assert!(found.read_only.contains(&ws.join(".gitconfig")));
    }

    #[test]
    fn what_a_command_made_among_the_protected_names_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("CLAUDE.md"), "mine").unwrap();
        let before = present(ws);
        assert_eq!(before, ["CLAUDE.md"]);
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        std::fs::write(ws.join(".claude/settings.json"), "{}").unwrap();
        std::fs::write(ws.join(".envrc"), "x").unwrap();
        std::fs::write(ws.join(".envrc.from-command"), "taken").unwrap();
        let moved = set_aside(ws, &before);
        assert_eq!(
            moved,
            [
                (".claude".to_owned(), ".claude.from-command".to_owned()),
                (".envrc".to_owned(), ".envrc.from-command.1".to_owned()),
            ]
        );
        assert!(ws.join(".claude.from-command/settings.json").exists());
        assert_eq!(
            std::fs::read_to_string(ws.join("CLAUDE.md")).unwrap(),
            "mine"
        );
        assert_eq!(present(ws), ["CLAUDE.md"]);
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
        let found = protected(&ws, None);
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
