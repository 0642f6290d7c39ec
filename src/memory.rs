//! Project memory, as Claude Code and Codex keep it: the user's
//! `~/.claude/CLAUDE.md`, then, from the repository's root down to the workspace,
//! each folder's `CLAUDE.md`, `.claude/CLAUDE.md` and `AGENTS.md` (the nearest
//! last, so it has the last word). Their text goes into the system prompt of the
//! lead and of every sub-agent. Files are read safely and bounded (`small_file`), and the
//! memory as a whole is cut at [`MAX_CHARS`] with a warning.

use std::path::{Path, PathBuf};

use crate::small_file;

/// The memory text loaded, at most (bytes of UTF-8, cut on a character).
pub const MAX_CHARS: usize = 40_000;

/// The memory of one workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// The files loaded, in order.
    pub files: Vec<PathBuf>,
    /// Their text, each under a heading naming it; empty when there are none.
    pub text: String,
    /// What a person should know: a file that could not be read, memory cut.
    pub warnings: Vec<String>,
}

/// The files that may hold memory for `workspace`, in loading order: the user's,
/// then each folder from the repository's root (the nearest folder above with a
/// `.git`; the workspace itself without one) down to the workspace.
pub fn candidates(workspace: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = home.map(user_file).into_iter().collect();
    files.extend(repository_files(workspace, repository_root(workspace)));
    files
}

/// The user's own memory file.
fn user_file(home: &Path) -> PathBuf {
    home.join(".claude/CLAUDE.md")
}

/// The repository's memory files, from `root` down to `workspace`.
fn repository_files(workspace: &Path, root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs: Vec<&Path> = workspace
        .ancestors()
        .take_while(|dir| dir.starts_with(root))
        .collect();
    dirs.reverse();
    for dir in dirs {
        for name in ["CLAUDE.md", ".claude/CLAUDE.md", "AGENTS.md"] {
            files.push(dir.join(name));
        }
    }
    files
}

/// The repository `workspace` is in: the nearest folder above with a `.git`,
/// else the workspace itself.
fn repository_root(workspace: &Path) -> &Path {
    workspace
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(workspace)
}

/// Reads the memory of `workspace`. A repository's file that leads outside the
/// repository (a symlink to `~/.aws/credentials`, say) is not read: its text
/// would reach every model request and journal (`small_file::read_within`).
pub fn load(workspace: &Path, home: Option<&Path>) -> Memory {
    let mut memory = Memory::default();
    let mut sections = Vec::new();
    let found = repository_root(workspace);
    let root = std::fs::canonicalize(found).unwrap_or_else(|_| workspace.to_owned());
    let user = home.map(user_file);
    let repository = repository_files(workspace, found);
    let files = user
        .iter()
        .map(|path| (path, true))
        .chain(repository.iter().map(|path| (path, false)));
    for (path, own) in files {
        // The user's file may be a link of theirs; a repository's may link within
        // the repository only.
        let read = match own {
            true => small_file::read_own(path, small_file::MAX_BYTES),
            false => small_file::read_within(&root, path, small_file::MAX_BYTES),
        };
        match read {
            Ok(text) if text.trim().is_empty() => {}
            Ok(text) => {
                sections.push(format!("## {}\n\n{}", path.display(), text.trim()));
                memory.files.push(path.clone());
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => memory.warnings.push(format!(
                "{}: {}; it is not loaded as memory",
                path.display(),
                e.problem
            )),
        }
    }
    if sections.is_empty() {
        return memory;
    }
    let mut text = format!(
        "# Memory\n\nInstructions the person keeps for this project (the later file wins where they disagree):\n\n{}",
        sections.join("\n\n")
    );
    if text.len() > MAX_CHARS {
        let total = text.len();
        let mut cut = MAX_CHARS;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[… the rest of the memory files was cut: they are too long]");
        memory.warnings.push(format!(
            "memory files are {total} characters; only the first {MAX_CHARS} are loaded (shorten {})",
            memory
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    memory.text = text;
    memory
}

impl Memory {
    /// A role's system prompt with the memory after it.
    pub fn apply(&self, prompt: &str) -> String {
        if self.text.is_empty() {
            return prompt.to_owned();
        }
        format!("{prompt}\n\n{}", self.text)
    }

    /// The files loaded, as text.
    pub fn names(&self) -> Vec<String> {
        self.files.iter().map(|f| f.display().to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_file_comes_first_then_the_repository_from_its_root_down() {
        let home = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(repo.path().join(".git")).unwrap();
        let ws = repo.path().join("crates/app");
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        std::fs::create_dir_all(home.path().join(".claude")).unwrap();
        std::fs::write(home.path().join(".claude/CLAUDE.md"), "user: tabs").unwrap();
        std::fs::write(repo.path().join("AGENTS.md"), "root: run cargo test").unwrap();
        std::fs::write(ws.join("CLAUDE.md"), "app: spaces").unwrap();
        std::fs::write(ws.join(".claude/CLAUDE.md"), "").unwrap();
        let memory = load(&ws, Some(home.path()));
        assert_eq!(
            memory.files,
            [
                home.path().join(".claude/CLAUDE.md"),
                repo.path().join("AGENTS.md"),
                ws.join("CLAUDE.md"),
            ]
        );
        let user = memory.text.find("user: tabs").unwrap();
        let root = memory.text.find("root: run cargo test").unwrap();
        let app = memory.text.find("app: spaces").unwrap();
        assert!(user < root && root < app, "nearest last");
        assert!(memory.warnings.is_empty());
        assert_eq!(
            memory.apply("You code."),
            format!("You code.\n\n{}", memory.text)
        );
    }

    #[test]
    fn without_a_repository_only_the_workspace_is_read_and_no_memory_changes_nothing() {
        let ws = tempfile::tempdir().unwrap();
        let memory = load(ws.path(), None);
        assert_eq!(memory, Memory::default());
        assert_eq!(memory.apply("You code."), "You code.");
        assert_eq!(candidates(ws.path(), None).len(), 3);
    }

    #[test]
    fn too_much_memory_is_cut_with_a_warning_and_an_unreadable_file_is_named() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("CLAUDE.md"), "é".repeat(30_000)).unwrap();
        std::fs::create_dir_all(ws.path().join("AGENTS.md")).unwrap();
        let memory = load(ws.path(), None);
        assert!(memory.text.len() <= MAX_CHARS + 100);
        assert!(memory.text.ends_with("they are too long]"));
        assert_eq!(memory.warnings.len(), 2, "{:?}", memory.warnings);
        assert!(memory.warnings[0].contains("AGENTS.md: not a regular file"));
        assert!(memory.warnings[1].starts_with("memory files are"));
    }

    #[test]
    fn a_repository_file_that_leads_outside_the_repository_is_not_read() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "AWS_SECRET=x").unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), ws.path().join("CLAUDE.md"))
            .unwrap();
        let memory = load(ws.path(), None);
        assert!(memory.files.is_empty());
        assert!(!memory.text.contains("AWS_SECRET"));
        assert!(
            memory.warnings[0]
                .contains(&format!("CLAUDE.md: leads outside {}", ws.path().display())),
            "{:?}",
            memory.warnings
        );
    }
}
