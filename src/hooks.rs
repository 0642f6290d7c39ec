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
//! hook an event matches, in parallel, and combines their answers. A
//! sub-agent on another machine asks its lead to run the run's hooks
//! ([`forward`]).

pub mod answer;
pub mod config;
pub mod forward;
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
    /// On a worker, for a task of a run elsewhere: that run's hooks, which
    /// its lead runs.
    lead: Option<forward::Lead>,
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
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
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
            lead: None,
        }
    }

    /// Whether any hook is set for `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.groups.iter().any(|(e, _)| *e == event)
            || self.lead.as_ref().is_some_and(|lead| lead.has(event))
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
    /// JSON object) added to the event's JSON, in parallel, with those its
    /// lead runs when the run is elsewhere; tells each run (its `hook_ran`
    /// event) to `tell`, in declaration order, this machine's first; their
    /// answers together.
    pub async fn fire(
        self: &Arc<Self>,
        event: HookEvent,
        tool: Option<&str>,
        place: &Place,
        fields: Value,
        tell: impl Fn(crate::protocol::EventKind),
    ) -> Answer {
        let lead = (self.lead.as_ref()).filter(|lead| lead.fires(event, tool));
        let mine = !self.matching(event, tool).is_empty();
        if !mine && lead.is_none() {
            return Answer::default();
        }
        let here = async {
            match mine {
                true => {
                    let input = input(event, place, fields.clone());
                    self.run_here(event, tool, &input, &place.cwd).await
                }
                false => Vec::new(),
            }
        };
        let there = async {
            match lead {
                Some(lead) => lead.ask(event, tool, place, fields.clone()).await,
                None => Vec::new(),
            }
        };
        let (mut fired, asked) = futures::join!(here, there);
        fired.extend(asked);
        for run in &fired {
            tell(run.event(event));
        }
        Answer::combine(fired.into_iter().map(|f| f.answer))
    }

    /// Runs this machine's hooks of `event` (for `tool`) in `cwd`, each given
    /// `input`, in parallel: each one's run, in declaration order.
    async fn run_here(
        &self,
        event: HookEvent,
        tool: Option<&str>,
        input: &Value,
        cwd: &Path,
    ) -> Vec<Fired> {
        let runs = self
            .matching(event, tool)
            .into_iter()
            .map(|hook| async move {
                let ran = run::run(hook, input, cwd, &self.project_dir).await;
                Fired {
                    command: hook.command.clone(),
                    answer: answer::read(event, hook, &ran),
                    exit_code: ran.exit_code,
                }
            });
        futures::future::join_all(runs).await
    }
}

/// The JSON a hook of `event` at `place` reads: `fields` (an object) with
/// who, where and what fired it, which `fields` cannot change.
fn input(event: HookEvent, place: &Place, fields: Value) -> Value {
    let mut input = match fields {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    input.insert("hook_event_name".into(), event.name().into());
    input.insert("session_id".into(), place.session.clone().into());
    input.insert("cwd".into(), place.cwd.display().to_string().into());
    match &place.transcript {
        Some(transcript) => input.insert(
            "transcript_path".into(),
            transcript.display().to_string().into(),
        ),
        None => input.remove("transcript_path"),
    };
    input.insert(
        "permission_mode".into(),
        place.permission_mode.clone().into(),
    );
    Value::Object(input)
}
