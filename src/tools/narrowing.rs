//! What a session may still do once something narrowed it: a slash command's
//! `allowed-tools` for the run it starts, a skill's once it is loaded. Each
//! narrowing is a list in Claude Code's rule syntax (`Read`, `Bash(git:*)`,
//! `mcp__server`, `mcp__server__tool`); a call runs only when every narrowing
//! in force allows it, so a later one can only narrow further. The `Skill`
//! tool itself stays allowed: loading another skill can only narrow more;
//! `Task` brings `TaskOutput` and `TaskStop` with it. A sub-agent started
//! under a narrowing is narrowed as its caller was. A session started under
//! a narrowing is offered only what it allows; one narrowed later (a skill
//! loaded) keeps the list it was offered, its calls refused.

use std::sync::{Arc, Mutex, PoisonError};

use super::rules::{Rule, Rules};

/// One narrowing: what set it, and what it allows.
#[derive(Clone, Debug, PartialEq)]
pub struct Narrow {
    /// What set it, as a refusal names it (`the skill "pdf"`).
    pub by: String,
    /// The calls it allows.
    pub only: Arc<[Rule]>,
}

impl Narrow {
    /// The narrowing `by` sets with its `allowed-tools` entries `list`; the
    /// entries that are not rules are left out and returned apart.
    pub fn of(by: impl Into<String>, list: &[String]) -> (Self, Vec<String>) {
        let (mut only, bad) = super::rules::parse_list(list);
        // Tool names in any case, as role files take them (`LS`).
        for rule in &mut only {
            if let Some(known) = super::known_tool(&rule.tool) {
                rule.tool = known.to_owned();
            }
        }
        let narrow = Self {
            by: by.into(),
            only: only.into(),
        };
        (narrow, bad)
    }

    /// Whether some call of `tool` may be allowed: the tool is offered.
    pub fn offers(&self, tool: &str) -> bool {
        tool == "Skill"
            || self.only.iter().any(|rule| {
                super::rules::applies_to(&rule.tool, tool)
                    || (rule.tool == "Task" && matches!(tool, "TaskOutput" | "TaskStop"))
            })
    }

    /// Why a call of `tool` with `input` is refused (the run's `rules` match
    /// paths and commands), or `None` when this narrowing allows it.
    pub fn refusal(&self, rules: &Rules, tool: &str, input: &serde_json::Value) -> Option<String> {
        let follows_task = matches!(tool, "TaskOutput" | "TaskStop") && self.offers(tool);
        if tool == "Skill" || follows_task || rules.permits(&self.only, tool, input) {
            return None;
        }
        let allowed: Vec<String> = self.only.iter().map(ToString::to_string).collect();
        let allowed = match allowed.is_empty() {
            true => "no tools".to_owned(),
            false => allowed.join(", "),
        };
        Some(format!(
            "permission denied: {} allows only {allowed} (its allowed-tools), and this {tool} call is not one of them",
            self.by
        ))
    }
}

/// The narrowings in force in one session, shared by its calls.
#[derive(Debug, Default)]
pub struct Narrowing(Mutex<Vec<Narrow>>);

impl Narrowing {
    /// A session narrowed by `narrows` from its start.
    pub fn new(narrows: Vec<Narrow>) -> Self {
        Self(Mutex::new(narrows))
    }

    /// Adds `narrow` (the same one twice counts once).
    pub fn add(&self, narrow: Narrow) {
        let mut list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !list.contains(&narrow) {
            list.push(narrow);
        }
    }

    /// Why a call of `tool` with `input` is refused: the first narrowing in
    /// force that does not allow it.
    pub fn refusal(&self, rules: &Rules, tool: &str, input: &serde_json::Value) -> Option<String> {
        let list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        list.iter().find_map(|n| n.refusal(rules, tool, input))
    }

    /// The narrowings in force now (what a sub-agent started now inherits).
    pub fn snapshot(&self) -> Vec<Narrow> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Whether every one of `narrows` offers `tool`.
pub fn offered(narrows: &[Narrow], tool: &str) -> bool {
    narrows.iter().all(|n| n.offers(tool))
}

/// The `mcp__…` entries of `narrows`, one list per narrowing (what each
/// leaves of the MCP tools).
pub fn mcp_entries(narrows: &[Narrow]) -> Vec<Vec<String>> {
    (narrows.iter())
        .map(|n| {
            (n.only.iter())
                .filter(|r| r.tool.starts_with("mcp__"))
                .map(|r| r.tool.clone())
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn narrow(by: &str, list: &[&str]) -> Narrow {
        let list: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
        Narrow::of(by, &list).0
    }

    #[test]
    fn a_call_runs_only_when_every_narrowing_allows_it() {
        let rules = Rules::default();
        let narrowing = Narrowing::default();
        assert!(narrowing.refusal(&rules, "Write", &json!({})).is_none());
        narrowing.add(narrow(
            "the command /review",
            &["Read", "Grep", "Bash(git diff:*)"],
        ));
        assert!(
            narrowing
                .refusal(&rules, "Read", &json!({"file_path": "a"}))
                .is_none()
        );
        // Read covers the listings, as a Read rule does.
        assert!(
            narrowing
                .refusal(&rules, "Glob", &json!({"pattern": "*"}))
                .is_none()
        );
        let write = narrowing.refusal(&rules, "Write", &json!({})).unwrap();
        assert!(
            write.contains("the command /review allows only Read, Grep, Bash(git diff:*)"),
            "{write}"
        );
        assert!(
            narrowing
                .refusal(&rules, "Bash", &json!({"command": "git diff HEAD"}))
                .is_none()
        );
        assert!(
            narrowing
                .refusal(&rules, "Bash", &json!({"command": "git diff && rm -rf x"}))
                .is_some()
        );
        // A second narrowing narrows further, never widens.
        narrowing.add(narrow("the skill \"pdf\"", &["Read", "Write"]));
        assert!(
            narrowing
                .refusal(&rules, "Read", &json!({"file_path": "a"}))
                .is_none()
        );
        assert!(narrowing.refusal(&rules, "Write", &json!({})).is_some());
        let bash = json!({"command": "git diff HEAD"});
        let refused = narrowing.refusal(&rules, "Bash", &bash).unwrap();
        assert!(refused.contains("the skill \"pdf\""), "{refused}");
        // Loading another skill stays possible.
        assert!(
            narrowing
                .refusal(&rules, "Skill", &json!({"skill": "x"}))
                .is_none()
        );
    }

    #[test]
    fn mcp_entries_name_a_server_or_one_tool() {
        let rules = Rules::default();
        let n = narrow("x", &["mcp__files", "mcp__git__log"]);
        assert!(n.refusal(&rules, "mcp__files__read", &json!({})).is_none());
        assert!(n.refusal(&rules, "mcp__git__log", &json!({})).is_none());
        assert!(n.refusal(&rules, "mcp__git__push", &json!({})).is_some());
        let none = narrow("y", &[]);
        let refused = none.refusal(&rules, "Read", &json!({})).unwrap();
        assert!(refused.contains("allows only no tools"), "{refused}");
    }

    #[test]
    fn what_a_narrowing_allows_is_what_it_offers() {
        let n = narrow("x", &["Read", "Bash(git diff:*)", "Task", "mcp__git"]);
        for tool in [
            "Read",
            "Glob",
            "Grep",
            "Ls",
            "Bash",
            "Task",
            "TaskOutput",
            "TaskStop",
            "Skill",
            "mcp__git__log",
        ] {
            assert!(n.offers(tool), "{tool}");
        }
        for tool in ["Write", "Edit", "WebFetch", "mcp__files__read"] {
            assert!(!n.offers(tool), "{tool}");
        }
        let rules = Rules::default();
        assert!(
            n.refusal(&rules, "TaskOutput", &json!({"task_id": "x"}))
                .is_none()
        );
        assert!(
            narrow("y", &["Read"])
                .refusal(&rules, "TaskStop", &json!({}))
                .is_some()
        );
        let both = [n, narrow("z", &["Read", "mcp__files"])];
        assert!(offered(&both, "Read") && !offered(&both, "Bash"));
        assert_eq!(
            mcp_entries(&both),
            [vec!["mcp__git".to_owned()], vec!["mcp__files".to_owned()]]
        );
    }

    #[test]
    fn entries_that_are_not_rules_are_told_apart() {
        let lower = narrow("l", &["LS", "read"]);
        assert!(lower.offers("Ls") && lower.offers("Read"));
        let list = vec!["Read".to_owned(), "Bash(git".to_owned()];
        let (n, bad) = Narrow::of("z", &list);
        assert_eq!(n.only.len(), 1);
        assert_eq!(bad, vec!["Bash(git".to_owned()]);
    }
}
