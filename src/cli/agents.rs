//! `orchestrate agents list | show NAME | check`: the role catalog shown and checked
//! without running anything.

use std::io::Write;
use std::process::ExitCode;

use super::exit;
use super::flags::{AgentsAction, Cli};
use super::setup::workspace;
use crate::ui::progress::count;

/// `orchestrate agents list | show NAME | check`.
pub(super) fn run(
    cli: &Cli,
    action: &AgentsAction,
    env: &impl Fn(&str) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let workspace = match workspace(cli) {
        Ok(dir) => dir,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let home = env("HOME").map(std::path::PathBuf::from);
    let (_, catalog) = crate::setup::roles(&workspace, home.as_deref(), cli.agents_dir.as_deref());
    match action {
        AgentsAction::List => {
            for role in catalog.roles() {
                let summary = role
                    .description
                    .split(". ")
                    .next()
                    .unwrap_or(&role.description);
                let _ = writeln!(
                    out,
                    "{:<14} {}  [{}]",
                    role.name,
                    summary.trim_end_matches('.'),
                    role.source
                );
            }
            for problem in &catalog.problems {
                let _ = writeln!(err, "orchestrate: {problem}");
            }
            ExitCode::from(if catalog.problems.is_empty() {
                exit::DONE
            } else {
                exit::FAILED
            })
        }
        AgentsAction::Show { name } => match catalog.get(name) {
            Some(role) => {
                let memory = crate::memory::load(&workspace, home.as_deref());
                let _ = write!(out, "{}", crate::ui::role_card(role, &memory.names()));
                ExitCode::from(exit::DONE)
            }
            None => {
                // A file of that name that did not load: say where and why.
                let broken = catalog.problems.iter().find(|p| {
                    std::path::Path::new(&p.path)
                        .file_stem()
                        .is_some_and(|stem| stem == name.as_str())
                });
                if let Some(problem) = broken {
                    let _ = writeln!(err, "orchestrate: role {name:?} did not load: {problem}");
                    return ExitCode::from(exit::FAILED);
                }
                let names: Vec<&str> = catalog.roles().map(|r| r.name.as_str()).collect();
                let _ = writeln!(
                    err,
                    "orchestrate: no role named {name:?} (roles: {})",
                    names.join(", ")
                );
                ExitCode::from(exit::FAILED)
            }
        },
        AgentsAction::Check => {
            for warning in &catalog.warnings {
                let _ = writeln!(out, "warning: {warning}");
            }
            for problem in &catalog.problems {
                let _ = writeln!(out, "{problem}");
            }
            let roles = catalog.roles().count();
            if catalog.problems.is_empty() {
                let _ = writeln!(out, "{}, no problems", count(roles as u64, "role"));
                ExitCode::from(exit::DONE)
            } else {
                let n = catalog.problems.len() as u64;
                let _ = writeln!(out, "{} in the role files", count(n, "problem"));
                ExitCode::from(exit::FAILED)
            }
        }
    }
}
