//! The hooks of a run, from Claude Code's settings files in order (the
//! person's `~/.claude/settings.json`, then the workspace's
//! `.claude/settings.json` and `.claude/settings.local.json`). A hook is a
//! program run as the person: a workspace's run only once the person trusts the
//! workspace; otherwise they are named in a warning and not run.

use std::path::Path;

use serde_json::Value;

use super::rule::Origin;
use super::sources::Text;
use crate::error::ConfigError;
use crate::hooks::{HookEvent, Hooks, config};

/// The hooks of `files` for a run in `workspace`; `trusted`: the workspace's
/// run too. Warnings for what is not run.
pub(super) fn read(
    files: &[Text],
    workspace: &Path,
    trusted: bool,
) -> Result<(Hooks, Vec<String>), ConfigError> {
    let mut groups = Vec::new();
    let mut warnings = Vec::new();
    for file in files {
        let Ok(value) = serde_json::from_str::<Value>(&file.text) else {
            // The permission rules' reading names a file that is not JSON.
            continue;
        };
        let untrusted = file.origin == Origin::Workspace && !trusted;
        let (found, notes) = match config::parse(&file.path, &value) {
            Ok(parsed) => parsed,
            // Hooks that would not run anyway stop nothing.
            Err(e) if untrusted => {
                warnings.push(format!("{e}; the workspace's hooks are not run"));
                continue;
            }
            Err(e) => return Err(ConfigError::Invalid(e)),
        };
        warnings.extend(notes);
        if found.is_empty() {
            continue;
        }
        if untrusted {
            warnings.push(not_run(&file.path, &found));
            continue;
        }
        groups.extend(found);
    }
    Ok((Hooks::new(groups, workspace), warnings))
}

/// The warning for a workspace file's hooks that are not run.
fn not_run(path: &Path, found: &[(HookEvent, crate::hooks::Group)]) -> String {
    let commands: Vec<String> = found
        .iter()
        .flat_map(|(event, group)| {
            (group.hooks.iter()).map(move |h| format!("{}: {:?}", event.name(), h.command))
        })
        .collect();
    format!(
        "{}: its hooks are not run ({}): a repository's hooks are programs it would run as you; pass --trust-workspace to run them",
        path.display(),
        commands.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(path: &str, origin: Origin, body: &str) -> Text {
        Text {
            path: path.into(),
            origin,
            text: body.into(),
        }
    }

    #[test]
    fn a_workspace_s_hooks_run_only_once_it_is_trusted_and_are_named_otherwise() {
        let hook = r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}]}}"#;
        let files = [
            text("/home/me/.claude/settings.json", Origin::User, hook),
            text("/ws/.claude/settings.json", Origin::Workspace, hook),
        ];
        let (hooks, warnings) = read(&files, Path::new("/ws"), false).unwrap();
        assert_eq!(hooks.matching(HookEvent::PreToolUse, Some("Bash")).len(), 1);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with(
                "/ws/.claude/settings.json: its hooks are not run (PreToolUse: \"./guard.sh\")"
            ),
            "{}",
            warnings[0]
        );
        let (hooks, warnings) = read(&files, Path::new("/ws"), true).unwrap();
        assert_eq!(hooks.matching(HookEvent::PreToolUse, Some("Bash")).len(), 2);
        assert!(warnings.is_empty());
    }
}
