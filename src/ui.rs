//! The one module that talks to a person at a terminal: the progress board and its
//! renderings ([`progress`]), the permission question ([`question`]), the question
//! whether to trust a workspace ([`trust`]), role cards, and how text from a model
//! or a tool is shown there ([`escape`]: as text, never as commands).

pub mod display;
pub mod escape;
mod keyboard;
pub mod names;
pub mod progress;
pub mod question;
pub mod trust;

pub use self::escape::{Shown, visible};
pub use self::names::Names;
pub use self::question::TerminalApprover;

/// A role as `orchestrate agents show` prints it, with the memory files every
/// agent of the workspace gets.
pub fn role_card(role: &crate::roles::Role, memory: &[String]) -> String {
    let tools = role
        .tools
        .as_ref()
        .map_or_else(|| "every tool of its caller".to_owned(), |t| t.join(", "));
    let model = match &role.model {
        crate::roles::ModelChoice::Inherit => "inherit".to_owned(),
        crate::roles::ModelChoice::Named(m) => m.clone(),
    };
    let mut card = format!(
        "name:           {}\ndescription:    {}\nsource:         {}\ntools:          {tools}\n",
        role.name, role.description, role.source
    );
    let disallowed: Vec<String> = (role.disallowed_tools.iter().cloned())
        .chain(role.deny_rules.iter().map(ToString::to_string))
        .collect();
    if !disallowed.is_empty() {
        card.push_str(&format!("disallowed:     {}\n", disallowed.join(", ")));
    }
    card.push_str(&format!("model:          {model}\n"));
    if let Some(turns) = role.max_turns {
        card.push_str(&format!("maxTurns:       {turns}\n"));
    }
    if let Some(mode) = role.permission_mode {
        card.push_str(&format!("permissionMode: {mode}\n"));
    }
    if let Some(color) = &role.color {
        card.push_str(&format!("color:          {color}\n"));
    }
    let servers: Vec<String> = (role.mcp.named.iter().cloned())
        .chain(role.mcp.defined.keys().map(|n| format!("{n} (its own)")))
        .collect();
    if !servers.is_empty() {
        card.push_str(&format!("mcpServers:     {}\n", servers.join(", ")));
    }
    if !memory.is_empty() {
        card.push_str(&format!("memory:         {}\n", memory.join(", ")));
    }
    card.push_str(&format!("\n{}\n", role.prompt));
    card
}
