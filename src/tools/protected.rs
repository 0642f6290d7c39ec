//! The workspace's protected paths: what configures agents, editors, shells and
//! git, which a repository's content (or a prompt-injected model) would most
//! like to change. The file tools need a person's yes to change one, even in
//! `acceptEdits` and under an allow rule (in `bypassPermissions` they may);
//! sandboxed commands get the existing ones read-only (`bash::protect`).

use std::path::{Component, Path};

/// The workspace's files and folders (at its root) that configure agents,
/// editors and shells. `.git` is protected at any depth.
pub const PROTECTED: [&str; 11] = [
    ".claude",
    ".mcp.json",
    "orchestrate.toml",
    "agents",
    ".envrc",
    ".vscode",
    ".idea",
    ".husky",
    "CLAUDE.md",
    "AGENTS.md",
    ".kode",
];

/// Whether `path` (absolute, resolved) is a protected path of `workspace`, or in
/// one: a `.git` anywhere, or one of [`PROTECTED`] at the workspace's root.
pub fn is_protected(workspace: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(workspace) else {
        return false;
    };
    let mut parts = relative.components();
    let first = parts.next();
    let named = |part: Option<Component<'_>>, name: &str| matches!(part, Some(Component::Normal(n)) if n == name);
    PROTECTED.iter().any(|name| named(first, name))
        || relative
            .components()
            .any(|part| matches!(part, Component::Normal(n) if n == ".git"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_paths_are_found_at_the_root_and_git_anywhere() {
        let ws = Path::new("/w");
        for path in [
            "/w/.git/config",
            "/w/.git",
            "/w/vendor/lib/.git/hooks/pre-commit",
            "/w/.claude/settings.json",
            "/w/.mcp.json",
            "/w/agents/coder.md",
            "/w/.envrc",
            "/w/.vscode/tasks.json",
            "/w/.husky/pre-commit",
            "/w/CLAUDE.md",
            "/w/AGENTS.md",
        ] {
            assert!(is_protected(ws, Path::new(path)), "{path}");
        }
        for path in [
            "/w/src/main.rs",
            "/w/docs/CLAUDE.md",
            "/w/.gitignore",
            "/w/my.envrc",
            "/x/.git/config",
        ] {
            assert!(!is_protected(ws, Path::new(path)), "{path}");
        }
    }
}
