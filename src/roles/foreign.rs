//! Agent files of other tools, read as role files: Gemini CLI's
//! (`.gemini/agents/*.md`) and opencode's (`.opencode/agent/*.md`). Their
//! frontmatter is mapped to Claude Code's fields (tools by their names here,
//! a model this run can serve, permissions that only narrow), and the file is
//! then read as any role file; what has no counterpart is named in a warning.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Whose agent file a folder holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Gemini CLI's.
    Gemini,
    /// opencode's.
    Opencode,
}

/// The dialect of the files in `dir`, when it is another tool's folder.
pub fn dialect_of(dir: &Path) -> Option<Dialect> {
    let parent = dir.parent()?.file_name()?.to_str()?;
    let name = dir.file_name()?.to_str()?;
    match (parent, name) {
        (".gemini", "agents") => Some(Dialect::Gemini),
        (".opencode" | "opencode", "agent" | "agents") => Some(Dialect::Opencode),
        _ => None,
    }
}

/// Gemini CLI's tools by their names here (`None`: no counterpart).
fn gemini_tool(name: &str) -> Option<&'static str> {
    Some(match name {
        "read_file" | "read_many_files" => "Read",
        "write_file" => "Write",
        "replace" => "Edit",
        "run_shell_command" => "Bash",
        "glob" => "Glob",
        "search_file_content" | "grep_search" | "grep" => "Grep",
        "list_directory" | "ls" => "Ls",
        "web_fetch" => "WebFetch",
        "write_todos" => "TodoWrite",
        _ => return None,
    })
}

/// opencode's tools by their names here.
fn opencode_tools(name: &str) -> &'static [&'static str] {
    match name {
        "bash" => &["Bash"],
        "edit" | "patch" => &["Edit", "MultiEdit"],
        "write" => &["Write"],
        "read" => &["Read"],
        "grep" => &["Grep"],
        "glob" => &["Glob"],
        "list" => &["Ls"],
        "todowrite" => &["TodoWrite"],
        "webfetch" => &["WebFetch"],
        _ => &[],
    }
}

/// A model of another tool's file as a model of this run: a Claude or
/// OpenAI model keeps its id; any other makes the role inherit its caller's.
fn model(id: &str) -> Option<String> {
    let id = id.rsplit_once('/').map_or(id, |(_, id)| id);
    let served = ["claude", "gpt-", "o1", "o3", "o4"]
        .iter()
        .any(|p| id.starts_with(p));
    served.then(|| id.to_owned())
}

/// The text of the agent file at `path` (named `stem`) in `dialect`, as a
/// Claude Code role file; warnings for what has no counterpart.
pub fn translate(
    dialect: Dialect,
    path: &str,
    stem: &str,
    text: &str,
) -> Result<(String, Vec<String>), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .ok_or("no YAML frontmatter: an agent file starts with a line `---`")?;
    let (front, body) = rest
        .split_once("\n---\n")
        .or_else(|| rest.strip_suffix("\n---").map(|f| (f, "")))
        .ok_or("the frontmatter is never closed by a line `---`")?;
    let fields: BTreeMap<String, Value> = match front.trim().is_empty() {
        true => BTreeMap::new(),
        false => serde_saphyr::from_str(front).map_err(|e| format!("invalid frontmatter: {e}"))?,
    };
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut warnings = Vec::new();
    let mut disallowed: Vec<String> = Vec::new();
    let text_of = |v: &Value| v.as_str().map(str::to_owned);
    for (key, value) in &fields {
        match (dialect, key.as_str()) {
            (_, "name" | "description") => out.push((key.clone(), value.clone())),
            (_, "model") => match text_of(value).and_then(|m| model(&m)) {
                Some(id) => out.push(("model".into(), id.into())),
                None => warnings.push(format!(
                    "{path}: model {value} is not served here; the role inherits its caller's model"
                )),
            },
            (Dialect::Gemini, "tools") => {
                let names: Vec<String> = match value {
                    Value::Array(items) => items.iter().filter_map(text_of).collect(),
                    Value::String(s) => s.split(',').map(|t| t.trim().to_owned()).collect(),
                    _ => Vec::new(),
                };
                let mut tools = Vec::new();
                for name in names {
                    match gemini_tool(&name) {
                        Some(tool) if !tools.contains(&tool) => tools.push(tool),
                        Some(_) => {}
                        None => warnings.push(format!(
                            "{path}: tool {name:?} has no counterpart here; the role runs without it"
                        )),
                    }
                }
                out.push(("tools".into(), tools.join(", ").into()));
            }
            (Dialect::Gemini, "max_turns") => out.push(("maxTurns".into(), value.clone())),
            (Dialect::Gemini, "timeout_mins") => {
                if let Some(minutes) = value.as_f64() {
                    out.push((
                        "timeout".into(),
                        format!("{}s", (minutes * 60.0) as u64).into(),
                    ));
                }
            }
            (Dialect::Opencode, "mode") => {}
            (Dialect::Opencode, "tools") => {
                for (name, on) in value.as_object().into_iter().flatten() {
                    if on == &Value::Bool(false) {
                        let tools = opencode_tools(name);
                        if tools.is_empty() {
                            warnings.push(format!(
                                "{path}: tools.{name} has no counterpart here; it is ignored"
                            ));
                        }
                        disallowed.extend(tools.iter().map(|t| (*t).to_owned()));
                    }
                }
            }
            (Dialect::Opencode, "permission") => {
                permissions(path, value, &mut out, &mut disallowed, &mut warnings)
            }
            // Anything else goes through as it is, and is named if unknown.
            _ => out.push((key.clone(), value.clone())),
        }
    }
    if dialect == Dialect::Opencode && !fields.contains_key("name") {
        out.push(("name".into(), stem.into()));
    }
    if !disallowed.is_empty() {
        disallowed.dedup();
        out.push((
            "disallowedTools".into(),
            disallowed.into_iter().map(Value::String).collect(),
        ));
    }
    let mut role = String::from("---\n");
    for (key, value) in out {
        // JSON is YAML: every value keeps its exact text.
        role.push_str(&format!("{key}: {value}\n"));
    }
    role.push_str("---\n");
    role.push_str(body);
    Ok((role, warnings))
}

/// opencode's `permission` (`edit`, `bash`, `webfetch`: `allow`, `ask` or
/// `deny`; `bash` may map command patterns): a deny refuses the tool (or the
/// commands), an ask makes the role ask (`permissionMode: default`).
fn permissions(
    path: &str,
    value: &Value,
    out: &mut Vec<(String, Value)>,
    disallowed: &mut Vec<String>,
    warnings: &mut Vec<String>,
) {
    let mut asks = false;
    for (name, rule) in value.as_object().into_iter().flatten() {
        let tools = opencode_tools(name);
        match (rule.as_str(), rule.as_object()) {
            (Some("deny"), _) => disallowed.extend(tools.iter().map(|t| (*t).to_owned())),
            (Some("ask"), _) => asks = true,
            (Some(_), _) => {}
            (None, Some(patterns)) if name == "bash" => {
                for (pattern, verdict) in patterns {
                    match verdict.as_str() {
                        Some("deny") => disallowed.push(bash_rule(pattern)),
                        Some("ask") => asks = true,
                        _ => {}
                    }
                }
            }
            _ => warnings.push(format!(
                "{path}: permission.{name} has no counterpart here; it is ignored"
            )),
        }
    }
    if asks {
        out.push(("permissionMode".into(), "default".into()));
    }
}

/// An opencode command pattern (`git push *`) as a Bash rule.
fn bash_rule(pattern: &str) -> String {
    match pattern
        .trim()
        .strip_suffix(" *")
        .or_else(|| pattern.trim().strip_suffix('*'))
    {
        Some(prefix) if pattern.trim() != "*" => format!("Bash({}:*)", prefix.trim()),
        _ if pattern.trim() == "*" => "Bash".to_owned(),
        _ => format!("Bash({})", pattern.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::{ModelChoice, parse};

    #[test]
    fn a_gemini_agent_becomes_a_role_with_its_tools_turns_and_time() {
        let text = "---\nname: scout\ndescription: Finds things.\nkind: local\ntools:\n  - read_file\n  - grep_search\n  - google_web_search\nmodel: gemini-2.5-pro\nmax_turns: 12\ntimeout_mins: 5\n---\nYou find things.\n";
        let (role, warnings) = translate(Dialect::Gemini, "s.md", "s", text).unwrap();
        let role = parse("s.md", &role).unwrap();
        assert_eq!(role.name, "scout");
        assert_eq!(role.tools, Some(vec!["Read".to_owned(), "Grep".to_owned()]));
        assert_eq!(role.model, ModelChoice::Inherit);
        assert_eq!(role.max_turns, Some(12));
        assert_eq!(
            role.budget.timeout,
            Some(std::time::Duration::from_secs(300))
        );
        assert_eq!(role.prompt, "You find things.");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            role.warnings.iter().any(|w| w.contains("kind")),
            "{:?}",
            role.warnings
        );
    }

    #[test]
    fn an_opencode_agent_is_named_by_its_file_and_its_denials_narrow() {
        let text = "---\ndescription: Reviews.\nmode: subagent\nmodel: anthropic/claude-sonnet-4-5\ntools:\n  write: false\n  edit: false\npermission:\n  webfetch: deny\n  bash:\n    \"git push *\": deny\n    \"*\": ask\n---\nYou review.\n";
        let (role, warnings) = translate(Dialect::Opencode, "r.md", "reviewer", text).unwrap();
        let role = parse("r.md", &role).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(role.name, "reviewer");
        assert_eq!(role.model, ModelChoice::Named("claude-sonnet-4-5".into()));
        for tool in ["Write", "Edit", "MultiEdit", "WebFetch"] {
            assert!(
                role.disallowed_tools.contains(&tool.to_owned()),
                "{tool}: {:?}",
                role.disallowed_tools
            );
        }
        assert_eq!(role.deny_rules.len(), 1);
        assert_eq!(role.deny_rules[0].to_string(), "Bash(git push:*)");
        assert_eq!(
            role.permission_mode,
            Some(crate::tools::permissions::PermissionMode::Default)
        );
    }

    #[test]
    fn other_tools_folders_are_known_by_their_names() {
        assert_eq!(
            dialect_of(Path::new("/w/.gemini/agents")),
            Some(Dialect::Gemini)
        );
        assert_eq!(
            dialect_of(Path::new("/w/.opencode/agent")),
            Some(Dialect::Opencode)
        );
        assert_eq!(
            dialect_of(Path::new("/h/.config/opencode/agent")),
            Some(Dialect::Opencode)
        );
        assert_eq!(dialect_of(Path::new("/w/.claude/agents")), None);
    }
}
