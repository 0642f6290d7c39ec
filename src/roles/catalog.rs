//! Where roles come from, and which one wins: the built-in roles compiled in from
//! the repository's `agents/`, then each directory of the search path in order, a
//! later role replacing an earlier one of the same name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Role, RoleError, parse};
use crate::small_file;

/// The built-in roles, compiled in from `agents/`.
pub const BUILT_IN: [(&str, &str); 5] = [
    (
        "orchestrator.md",
        include_str!("../../agents/orchestrator.md"),
    ),
    ("explorer.md", include_str!("../../agents/explorer.md")),
    ("coder.md", include_str!("../../agents/coder.md")),
    ("reviewer.md", include_str!("../../agents/reviewer.md")),
    ("tester.md", include_str!("../../agents/tester.md")),
];

/// The directories searched after the built-in roles, in order (a later one's
/// role replaces an earlier one's of the same name): the user's
/// `~/.config/opencode/agent`, `~/.gemini/agents`, `~/.kode/agents`,
/// `~/.claude/agents` and `~/.config/orchestrate/agents`, the workspace's
/// `.opencode/agent`, `.gemini/agents`, `.kode/agents`, `.claude/agents` and
/// `agents/`, then `extra` (`--agents-dir`).
pub fn search_dirs(workspace: &Path, home: Option<&Path>, extra: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(home) = home {
        dirs.push(home.join(".config/opencode/agent"));
        dirs.push(home.join(".gemini/agents"));
        dirs.push(home.join(".kode/agents"));
        dirs.push(home.join(".claude/agents"));
        dirs.push(home.join(".config/orchestrate/agents"));
    }
    dirs.push(workspace.join(".opencode/agent"));
    dirs.push(workspace.join(".gemini/agents"));
    dirs.push(workspace.join(".kode/agents"));
    dirs.push(workspace.join(".claude/agents"));
    dirs.push(workspace.join("agents"));
    if let Some(extra) = extra {
        dirs.push(extra.to_owned());
    }
    dirs
}

/// Every role found, with every problem met on the way.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    roles: BTreeMap<String, Role>,
    /// Files that could not be used, each as `path:line: what is wrong`.
    pub problems: Vec<RoleError>,
    /// Accepted oddities (ignored fields, roles replaced by later ones).
    pub warnings: Vec<String>,
}

impl Catalog {
    /// The built-in roles, then the roles in `dirs` (missing directories are
    /// fine), every file read as the person's own (their links followed).
    pub fn load(dirs: &[PathBuf]) -> Self {
        Self::load_in(dirs, None)
    }

    /// [`Catalog::load`], but a file under `workspace` (canonical) is the
    /// repository's: its links are followed only while they stay in the
    /// workspace.
    pub fn load_in(dirs: &[PathBuf], workspace: Option<&Path>) -> Self {
        let mut catalog = Self::default();
        for (file, text) in BUILT_IN {
            catalog.add(parse(&format!("built-in:{file}"), text));
        }
        for dir in dirs {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                // The search path names directories that often do not exist.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    catalog.problems.push(RoleError {
                        path: dir.display().to_string(),
                        line: 1,
                        message: format!("cannot read the directory: {e}"),
                    });
                    continue;
                }
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                // Anything else named *.md is a problem the reader reports (a FIFO,
                // a symlink to a device): never skipped in silence.
                .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.is_dir())
                .filter(|p| {
                    p.file_name()
                        .is_none_or(|n| !n.eq_ignore_ascii_case("README.md"))
                })
                .collect();
            files.sort();
            for file in files {
                let shown = file.display().to_string();
                let read = match workspace.filter(|ws| file.starts_with(ws)) {
                    Some(ws) => small_file::read_within(ws, &file, small_file::MAX_BYTES),
                    None => small_file::read_own(&file, small_file::MAX_BYTES),
                };
                match read {
                    Ok(text) => match super::foreign::dialect_of(dir) {
                        None => catalog.add(parse(&shown, &text)),
                        Some(dialect) => {
                            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                            match super::foreign::translate(dialect, &shown, stem, &text) {
                                Ok((role, notes)) => {
                                    catalog.warnings.extend(notes);
                                    catalog.add(parse(&shown, &role));
                                }
                                Err(message) => catalog.problems.push(RoleError {
                                    path: shown,
                                    line: 1,
                                    message,
                                }),
                            }
                        }
                    },
                    Err(e) => catalog.problems.push(RoleError {
                        path: shown,
                        line: 0,
                        message: e.problem.to_string(),
                    }),
                }
            }
        }
        catalog
    }

    fn add(&mut self, parsed: Result<Role, RoleError>) {
        match parsed {
            Ok(role) => {
                self.warnings.extend(role.warnings.iter().cloned());
                if let Some(old) = self.roles.get(&role.name)
                    && !old.source.starts_with("built-in:")
                {
                    self.warnings.push(format!(
                        "{}: replaces the role {:?} from {}",
                        role.source, role.name, old.source
                    ));
                }
                self.roles.insert(role.name.clone(), role);
            }
            Err(problem) => self.problems.push(problem),
        }
    }

    /// The role with this name.
    pub fn get(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    /// Every role, by name.
    pub fn roles(&self) -> impl Iterator<Item = &Role> {
        self.roles.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\nPrompt of {name}.\n")
    }

    #[test]
    fn the_built_in_roles_all_parse() {
        let catalog = Catalog::load(&[]);
        assert_eq!(catalog.problems, vec![]);
        let names: Vec<&str> = catalog.roles().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["coder", "explorer", "orchestrator", "reviewer", "tester"]
        );
        assert!(
            catalog
                .get("explorer")
                .unwrap()
                .prompt
                .starts_with("You are a code explorer.")
        );
    }

    #[test]
    fn later_directories_win_by_name_and_problems_are_all_kept() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let user = home.path().join(".claude/agents");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(
            user.join("explorer.md"),
            role("explorer", "the user's explorer"),
        )
        .unwrap();
        std::fs::write(user.join("helper.md"), role("helper", "a user helper")).unwrap();
        let local = ws.path().join("agents");
        std::fs::create_dir_all(&local).unwrap();
        std::fs::write(
            local.join("helper.md"),
            role("helper", "the workspace helper"),
        )
        .unwrap();
        std::fs::write(local.join("broken.md"), "---\nname: broken\n---\n").unwrap();
        std::fs::write(local.join("README.md"), "# not a role\n").unwrap();

        let catalog = Catalog::load(&search_dirs(ws.path(), Some(home.path()), None));

        assert_eq!(
            catalog.get("explorer").unwrap().description,
            "the user's explorer"
        );
        assert_eq!(
            catalog.get("helper").unwrap().description,
            "the workspace helper"
        );
        assert_eq!(catalog.get("coder").unwrap().source, "built-in:coder.md");
        let problems: Vec<String> = catalog.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [format!(
                "{}:1: description is required",
                local.join("broken.md").display()
            )]
        );
        assert!(
            catalog
                .warnings
                .iter()
                .any(|w| w.contains("replaces the role \"helper\"")),
            "{:?}",
            catalog.warnings
        );
    }

    #[test]
    fn an_oversize_role_a_fifo_and_a_symlink_to_dev_zero_are_problems_not_reads() {
        let ws = tempfile::tempdir().unwrap();
        let local = ws.path().join("agents");
        std::fs::create_dir_all(&local).unwrap();
        let mut huge = role("huge", "too much");
        huge.push_str(&"x".repeat(small_file::MAX_BYTES as usize));
        std::fs::write(local.join("huge.md"), &huge).unwrap();
        crate::small_file::fifo(&local.join("fifo.md"));
        std::os::unix::fs::symlink("/dev/zero", local.join("zero.md")).unwrap();
        std::fs::write(local.join("fine.md"), role("fine", "still loaded")).unwrap();

        // Returns at all: neither the FIFO nor /dev/zero is read.
        let catalog = Catalog::load(&search_dirs(ws.path(), None, None));

        let problems: Vec<String> = catalog.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                format!("{}: not a regular file", local.join("fifo.md").display()),
                format!(
                    "{}: too large ({} bytes; the limit is {})",
                    local.join("huge.md").display(),
                    huge.len(),
                    small_file::MAX_BYTES
                ),
                format!("{}: not a regular file", local.join("zero.md").display()),
            ]
        );
        assert_eq!(catalog.get("fine").unwrap().description, "still loaded");
        assert!(catalog.get("huge").is_none());
    }

    #[test]
    fn the_search_order_is_the_documented_one() {
        let dirs = search_dirs(
            Path::new("/ws"),
            Some(Path::new("/home/u")),
            Some(Path::new("/extra")),
        );
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        assert_eq!(
            dirs,
            [
                "/home/u/.config/opencode/agent",
                "/home/u/.gemini/agents",
                "/home/u/.kode/agents",
                "/home/u/.claude/agents",
                "/home/u/.config/orchestrate/agents",
                "/ws/.opencode/agent",
                "/ws/.gemini/agents",
                "/ws/.kode/agents",
                "/ws/.claude/agents",
                "/ws/agents",
                "/extra"
            ]
        );
    }
}
