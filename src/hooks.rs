//! Claude Code's hooks: programs the person's settings name, run at points of
//! an agent's life (before and after a tool call, when a prompt is submitted,
//! when an agent would stop, when a session starts and ends), each given the
//! event as JSON on its standard input and answering by its exit code or by
//! JSON on its standard output. They run as the person's own programs, outside
//! the sandbox that confines the agents' commands; a workspace's hooks run only
//! once the person trusts the workspace.
//!
//! [`config`] reads them from the settings files, [`run`] runs one,
//! [`answer`] reads what it answered (pure), and [`Hooks::fire`] runs every
//! hook an event matches, in parallel, and combines their answers.

pub mod answer;
pub mod config;
pub mod run;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

pub use self::answer::{Answer, Permission};
pub use self::config::{CommandHook, Group, HookEvent};
pub use self::run::Ran;

/// The hooks of a run, read once at its start.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    /// The groups of each event, in the order the files declare them.
    groups: Vec<(HookEvent, Group)>,
    /// The workspace (`CLAUDE_PROJECT_DIR`).
    project_dir: PathBuf,
}

/// Where an event happens: who, and in which folder.
#[derive(Clone, Debug)]
pub struct Place {
    /// The session (`session_id`).
    pub session: String,
    /// Its working directory (`cwd`, and the hook's).
    pub cwd: PathBuf,
    /// Its journal (`transcript_path`), when it has one.
    pub transcript: Option<PathBuf>,
    /// Its permission mode (`permission_mode`).
    pub permission_mode: String,
}

/// One hook's run and what it answered, for the event that journals it.
#[derive(Clone, Debug)]
pub struct Fired {
    /// The hook's command.
    pub command: String,
    /// What it answered.
    pub answer: Answer,
    /// Its exit code (`None`: it was killed, timed out or never started).
    pub exit_code: Option<i32>,
}

impl Fired {
    /// The event that tells (and journals) this run of a hook of `event`.
    pub fn event(&self, event: HookEvent) -> crate::protocol::EventKind {
        crate::protocol::EventKind::HookRan {
            event: event.name().to_owned(),
            command: self.command.clone(),
            exit_code: self.exit_code,
            decision: self.answer.decision().to_owned(),
            reason: (self.answer.stop.clone()).or_else(|| self.answer.block.clone()),
            notice: self.answer.notice.clone(),
        }
    }
}

/// `prompt` with the `context` prompt hooks added to it.
pub fn with_context(prompt: String, context: &[String]) -> String {
    match context.is_empty() {
        true => prompt,
        false => format!("{prompt}\n\n{}", context.join("\n\n")),
    }
}

impl Hooks {
    /// The hooks of `groups` for a run in `project_dir`.
    pub fn new(groups: Vec<(HookEvent, Group)>, project_dir: &Path) -> Self {
        Self {
            groups,
            project_dir: project_dir.to_owned(),
        }
    }

    /// Whether any hook is set for `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.groups.iter().any(|(e, _)| *e == event)
    }

    /// The hooks `event` runs, for tool `tool` when it concerns one.
    pub fn matching(&self, event: HookEvent, tool: Option<&str>) -> Vec<&CommandHook> {
        (self.groups.iter())
            .filter(|(e, group)| *e == event && group.matches(tool))
            .flat_map(|(_, group)| group.hooks.iter())
            .collect()
    }

    /// Runs the `UserPromptSubmit` hooks of the person's `prompt` at
    /// `place`, telling each run to `tell`: the context they add, or why
    /// they refused it.
    pub async fn submit(
        self: &Arc<Self>,
        place: &Place,
        prompt: &str,
        tell: impl Fn(crate::protocol::EventKind),
    ) -> Result<Vec<String>, String> {
        let fields = serde_json::json!({ "prompt": prompt });
        let answer = (self.fire(HookEvent::UserPromptSubmit, None, place, fields, tell)).await;
        match answer.stop.or(answer.block) {
            Some(reason) => Err(reason),
            None => Ok(answer.context),
        }
    }

    /// Runs every hook of `event` (for `tool`) at `place` with `fields` (a
    /// JSON object) added to the event's JSON, in parallel; tells each run
    /// (its `hook_ran` event) to `tell`, in declaration order; their answers
    /// together.
    pub async fn fire(
        self: &Arc<Self>,
        event: HookEvent,
        tool: Option<&str>,
        place: &Place,
        fields: Value,
        tell: impl Fn(crate::protocol::EventKind),
    ) -> Answer {
        let hooks = self.matching(event, tool);
        if hooks.is_empty() {
            return Answer::default();
        }
        let mut input = serde_json::Map::new();
        input.insert("hook_event_name".into(), event.name().into());
        input.insert("session_id".into(), place.session.clone().into());
        input.insert("cwd".into(), place.cwd.display().to_string().into());
        if let Some(transcript) = &place.transcript {
            input.insert(
                "transcript_path".into(),
                transcript.display().to_string().into(),
            );
        }
        input.insert(
            "permission_mode".into(),
            place.permission_mode.clone().into(),
        );
        if let Value::Object(fields) = fields {
            input.extend(fields);
        }
        let input = Value::Object(input);
        let runs = hooks.iter().map(|hook| {
            let input = &input;
            async move {
                let ran = run::run(hook, input, &place.cwd, &self.project_dir).await;
                Fired {
                    command: hook.command.clone(),
                    answer: answer::read(event, hook, &ran),
                    exit_code: ran.exit_code,
                }
            }
        });
        let fired = futures::future::join_all(runs).await;
        for run in &fired {
            tell(run.event(event));
        }
        Answer::combine(fired.into_iter().map(|f| f.answer))
    }
}
