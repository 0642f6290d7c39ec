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
        let name = input["skill"].as_str().or(input["command"].as_str())?;
        let skill = self.skills.get(name.trim().trim_start_matches('/'))?;
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
            let name = input.skill.trim().trim_start_matches('/');
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
