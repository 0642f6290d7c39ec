//! A task that names a slash command (`orchestrate "/review src/main.rs"`):
//! the command's body, its arguments filled in, becomes the task; its
//! `allowed-tools` narrow the lead's tools and its `model` is the lead's. A
//! task that names no command runs as it is.

use std::path::Path;

use crate::commands;

/// What a slash command makes of a run.
#[derive(Debug)]
pub(super) struct Slash {
    /// The task.
    pub(super) prompt: String,
    /// Its `allowed-tools` entries (`None`: its role's tools): the tools
    /// offered to the lead are those they name, and what the lead's calls may
    /// do is narrowed to them (`Bash(git:*)`, `mcp__server`).
    pub(super) tools: Option<Vec<String>>,
    /// The lead's model.
    pub(super) model: Option<String>,
    /// The command's file.
    pub(super) source: String,
}

impl Slash {
    /// What its `allowed-tools` narrow a session to (`None`: nothing); why
    /// not, when an entry is no tool or rule.
    pub(super) fn narrow(&self) -> Result<Option<crate::tools::narrowing::Narrow>, String> {
        let Some(only) = &self.tools else {
            return Ok(None);
        };
        let by = format!("the command {}", self.source);
        let (narrow, bad) = crate::tools::narrowing::Narrow::of(by, only);
        match bad.is_empty() {
            true => Ok(Some(narrow)),
            false => Err(format!(
                "{}: allowed-tools: not a tool or rule: {}",
                self.source,
                bad.join(", ")
            )),
        }
    }
}

/// The run `task` names when it is a command of `workspace` or `home`;
/// `trusted`: the workspace's commands may run their `` !`…` `` and read their
/// `@file`s. Warnings are said on `err`.
pub(super) async fn slash(
    task: &str,
    workspace: &Path,
    home: Option<&Path>,
    trusted: bool,
    err: &mut dyn std::io::Write,
) -> Result<Option<Slash>, String> {
    let Some((name, args)) = commands::split(task) else {
        return Ok(None);
    };
    let Some(command) = commands::find(workspace, home, name)? else {
        return Ok(None);
    };
    let allowed = command.own || trusted;
    let (prompt, notes) = commands::expand(&command.body, args, workspace, allowed).await;
    let source = command.source.display().to_string();
    for note in notes {
        let _ = writeln!(err, "orchestrate: warning: {source}: {note}");
    }
    Ok(Some(Slash {
        prompt,
        tools: command.allowed_tools,
        model: command.model,
        source,
    }))
}
