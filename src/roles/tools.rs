//! A role's `tools:` and `disallowedTools:` entries as people write them for
//! Claude Code and Kode: tool names (any case, `LS` for `Ls`), `*` for every tool,
//! rules with a pattern, and `mcp__server__tool` names. In `tools:`, `Bash(git:*)`
//! allows Bash for matching commands only; in `disallowedTools:`, a rule with a
//! pattern (`Bash(rm:*)`, `Edit(.env)`, `WebFetch(domain:x.com)`) refuses the
//! matching calls and leaves the tool, as a deny rule does. An entry orchestrate
//! does not provide is a warning, never a reason to refuse the role.

use crate::tools::rules::Rule;

/// What a list of entries says.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Entries {
    /// The tools named; `None`: every tool (`*`).
    pub(super) tools: Option<Vec<String>>,
    /// `Bash(…)` rules, when Bash is allowed only for some commands.
    pub(super) bash_rules: Vec<Rule>,
    /// Rules with a pattern, of a list that refuses (`disallowedTools:`): the calls
    /// they match are refused; their tools stay.
    pub(super) deny_rules: Vec<Rule>,
    /// Entries that name nothing orchestrate provides, as warnings.
    pub(super) warnings: Vec<String>,
}

/// Whether a list allows the tools it names (`tools:`) or refuses them
/// (`disallowedTools:`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum List {
    Allow,
    Deny,
}

/// Reads `names` (from the field `key` at `path:line`).
pub(super) fn entries(names: &[String], list: List, key: &str, path: &str, line: usize) -> Entries {
    let mut out = Entries {
        tools: Some(Vec::new()),
        ..Entries::default()
    };
    let mut plain_bash = false;
    for name in names {
        if name == "*" {
            out.tools = None;
            continue;
        }
        let Some(rule) = Rule::parse(name) else {
            out.warnings.push(format!(
                "{path}:{line}: {key} entry {name:?} is not a tool name or rule; it is ignored"
            ));
            continue;
        };
        // An MCP tool or server: which exist is known only when the run starts
        // its servers.
        if rule.tool.starts_with("mcp__") && rule.pattern.is_none() {
            if let Some(tools) = out.tools.as_mut()
                && !tools.contains(&rule.tool)
            {
                tools.push(rule.tool);
            }
            continue;
        }
        let Some(known) = crate::tools::known_tool(&rule.tool) else {
            out.warnings.push(format!(
                "{path}:{line}: tool {:?} is not available here; the role runs without it",
                rule.tool
            ));
            continue;
        };
        if list == List::Deny && rule.pattern.is_some() {
            if crate::tools::rules::takes_a_pattern(known) {
                out.deny_rules.push(Rule {
                    tool: known.to_owned(),
                    pattern: rule.pattern,
                });
            } else {
                out.warnings.push(format!(
                    "{path}:{line}: {key} entry {name:?}: a {known} call has nothing a pattern can match; it is ignored (name {known} alone to take the tool away)"
                ));
            }
            continue;
        }
        match (&rule.pattern, known) {
            (Some(_), "Bash") => out.bash_rules.push(Rule {
                tool: "Bash".to_owned(),
                pattern: rule.pattern,
            }),
            (Some(_), other) => out.warnings.push(format!(
                "{path}:{line}: {name:?}: only Bash rules narrow a tool here; {other} is allowed whole"
            )),
            (None, "Bash") => plain_bash = true,
            (None, _) => {}
        }
        if let Some(tools) = out.tools.as_mut()
            && !tools.iter().any(|t| t == known)
        {
            tools.push(known.to_owned());
        }
    }
    if plain_bash || out.tools.is_none() {
        // Bash named whole (or every tool): no rule narrows it.
        out.bash_rules.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(names: &[&str]) -> Entries {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        entries(&names, List::Allow, "tools", "a.md", 4)
    }

    fn refused(names: &[&str]) -> Entries {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        entries(&names, List::Deny, "disallowedTools", "a.md", 5)
    }

    #[test]
    fn a_refused_rule_with_a_pattern_refuses_its_calls_and_leaves_the_tool() {
        let e = refused(&[
            "bash(rm:*)",
            "Edit(.env)",
            "WebFetch(domain:x.com)",
            "Write",
        ]);
        assert_eq!(e.tools, Some(vec!["Write".into()]));
        let rules: Vec<String> = e.deny_rules.iter().map(ToString::to_string).collect();
        assert_eq!(
            rules,
            ["Bash(rm:*)", "Edit(.env)", "WebFetch(domain:x.com)"]
        );
        assert!(e.bash_rules.is_empty());
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        let e = refused(&["Task(worker)"]);
        assert_eq!(e.tools, Some(vec![]));
        assert!(e.deny_rules.is_empty());
        assert_eq!(
            e.warnings,
            [
                "a.md:5: disallowedTools entry \"Task(worker)\": a Task call has nothing a pattern can match; it is ignored (name Task alone to take the tool away)"
            ]
        );
    }

    #[test]
    fn unknown_tools_are_warnings_and_the_rest_loads() {
        let e = read(&[
            "Read",
            "WebSearch",
            "grep",
            "LS",
            "NotebookEdit",
            "mcp__github__create_issue",
            "mcp__files",
        ]);
        assert_eq!(
            e.tools,
            Some(vec![
                "Read".into(),
                "Grep".into(),
                "Ls".into(),
                "mcp__github__create_issue".into(),
                "mcp__files".into()
            ])
        );
        assert_eq!(
            e.warnings,
            [
                "a.md:4: tool \"WebSearch\" is not available here; the role runs without it",
                "a.md:4: tool \"NotebookEdit\" is not available here; the role runs without it",
            ]
        );
    }

    #[test]
    fn a_star_is_every_tool() {
        assert_eq!(read(&["*"]).tools, None);
        assert_eq!(read(&["Read", "*"]).tools, None);
    }

    #[test]
    fn bash_rules_narrow_bash_unless_bash_is_named_whole() {
        let e = read(&["Read", "Bash(git:*)", "Bash(npm test)"]);
        assert_eq!(e.tools, Some(vec!["Read".into(), "Bash".into()]));
        let rules: Vec<String> = e.bash_rules.iter().map(ToString::to_string).collect();
        assert_eq!(rules, ["Bash(git:*)", "Bash(npm test)"]);
        assert!(read(&["Bash(git:*)", "Bash"]).bash_rules.is_empty());
        let e = read(&["Edit(src/**)"]);
        assert_eq!(e.tools, Some(vec!["Edit".into()]));
        assert_eq!(e.warnings.len(), 1);
    }
}
