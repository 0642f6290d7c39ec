//! The `Skill` tool: loads one of the run's skills whole (its `SKILL.md`, and
//! where its files are); its description lists the skills by name and
//! description, so the model knows when one applies.

use std::sync::Arc;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ToolError;
use crate::skills::Skills;
use crate::tools::{Concurrency, Tool, ToolContext};

/// Input of `Skill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillInput {
    /// The skill's name, as listed.
    #[serde(alias = "command")]
    pub skill: String,
}

/// Why `skill` cannot be used, when its `allowed-tools` hold an entry that
/// is not a tool or a rule: what it narrows to must be read as meant, or a
/// session would be left wider than the skill says.
pub fn unusable(skill: &crate::skills::Skill) -> Option<String> {
    let (_, bad) = crate::tools::rules::parse_list(skill.allowed_tools.as_deref()?);
    (!bad.is_empty()).then(|| {
        format!(
            "{}: allowed-tools: not a tool or rule: {}",
            skill.dir.join("SKILL.md").display(),
            bad.join(", ")
        )
    })
}

/// The skill's name in what the model asked for (`/pdf` or `pdf`).
fn asked(skill: &str) -> &str {
    skill.trim().trim_start_matches('/')
}

/// Loads a skill.
#[derive(Debug)]
pub struct Skill {
    skills: Arc<Skills>,
    description: String,
}

impl Skill {
    /// The tool for `skills`.
    pub fn new(skills: Arc<Skills>) -> Self {
        let listed: Vec<String> = skills
            .iter()
            .map(|s| format!("- {}: {}", s.name, s.description))
            .collect();
        let description = format!(
            "Loads a skill: instructions (and files beside them) for a kind of task. When a task \
             matches a skill's description, load it first and follow it. Skills:\n{}",
            listed.join("\n")
        );
        Self {
            skills,
            description,
        }
    }
}

impl Tool for Skill {
    fn name(&self) -> &str {
        "Skill"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        crate::tools::schema::<SkillInput>()
    }

    fn read_only(&self) -> bool {
        true
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn narrows(&self, input: &Value) -> Option<crate::tools::narrowing::Narrow> {
        let input: SkillInput = serde_json::from_value(input.clone()).ok()?;
        let skill = self.skills.get(asked(&input.skill))?;
        let list = skill.allowed_tools.as_ref()?;
        let by = format!("the skill {:?}", skill.name);
        Some(crate::tools::narrowing::Narrow::of(by, list).0)
    }

    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: SkillInput = crate::tools::parse(input)?;
            let name = asked(&input.skill);
            let Some(skill) = self.skills.get(name) else {
                let known: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
                return Err(ToolError::InvalidInput(format!(
                    "no skill named {name:?}; the skills are: {}",
                    known.join(", ")
                )));
            };
            let narrowed = match &skill.allowed_tools {
                Some(list) => format!(
                    "\nFrom now on this session may use only these tools (the skill's allowed-tools): {}\n",
                    list.join(", ")
                ),
                None => String::new(),
            };
            Ok(format!(
                "Base directory for this skill: {} (read its other files with Read)\n{narrowed}\n{}",
                skill.dir.display(),
                skill.text
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_whose_allowed_tools_cannot_be_read_is_skipped_with_why() {
        let dir = tempfile::tempdir().unwrap();
        for (name, allowed) in [("odd", "Read, Bash(git"), ("fine", "Read, Bash(git:*)")] {
            let folder = dir.path().join(".claude/skills").join(name);
            std::fs::create_dir_all(&folder).unwrap();
            let text =
                format!("---\nname: {name}\ndescription: d\nallowed-tools: {allowed}\n---\nx\n");
            std::fs::write(folder.join("SKILL.md"), text).unwrap();
        }
        // The person's own: their folders are readable by Read.
        let workspace = tempfile::tempdir().unwrap();
        let (skills, warnings) = Skills::load(workspace.path(), Some(dir.path()));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(skills.roots().len(), 2);
        let (skills, warnings) = skills.without_unusable(unusable);
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fine"]);
        assert_eq!(
            skills.roots().len(),
            1,
            "a skipped skill's files are not readable"
        );
        assert!(skills.roots()[0].ends_with("fine"));
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains(
                "odd/SKILL.md: allowed-tools: not a tool or rule: Bash(git; the skill is skipped"
            ),
            "{}",
            warnings[0]
        );
    }
}
