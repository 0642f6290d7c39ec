//! A run's hooks for its sub-agents on other machines. A task tells its
//! worker when the run's hooks fire ([`Shape`]: each group's event, matcher,
//! timeout and whether a failure blocks; never what it runs). The worker's
//! session asks the lead to run them ([`Asker`]) wherever it would run its
//! own; the lead runs them in its workspace ([`Hooks::answer`]), and each
//! run, with what it answered, goes back to be told and combined there. Only
//! the events that fire for a sub-agent travel.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::matched;
use super::{Answer, Fired, HookEvent, Hooks, Place};

/// The events that fire for a sub-agent: the only ones a worker asks for.
pub const SUB_AGENT_EVENTS: [HookEvent; 5] = [
    HookEvent::PreToolUse,
    HookEvent::PostToolUse,
    HookEvent::SubagentStop,
    HookEvent::PreCompact,
    HookEvent::Notification,
];

/// How long a worker waits past the longest timeout of the hooks it asks
/// for: the lead's own time, and the way there and back.
const MARGIN: Duration = Duration::from_secs(10);

/// The most a matcher that travels may compile to.
const MATCHER_SIZE: usize = 1 << 20;

/// One group of a run's hooks as its worker is told of it: when it fires,
/// not what it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Its event's name (`PreToolUse`, …).
    pub event: String,
    /// Its matcher, anchored; `None`: everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// The longest timeout of its hooks, in seconds.
    pub timeout_secs: u64,
    /// One of its hooks blocks when it cannot run (`onFailure: "block"`).
    #[serde(default)]
    pub blocks: bool,
}

/// A worker's request that its lead run the hooks of `event`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The event's name.
    pub event: String,
    /// The tool (or trigger) it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The event's own fields (`tool_input`, `stop_hook_active`, …).
    pub fields: Value,
    /// The sub-agent's folder on its worker (the input's `cwd`).
    pub cwd: String,
    /// Its permission mode.
    pub permission_mode: String,
}

/// What the lead answers a [`Request`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Each hook's run and answer.
    Fired(Vec<Fired>),
    /// Why it ran nothing.
    Refused(String),
}

/// Asks a run's lead to run its hooks.
pub trait Asker: Send + Sync + std::fmt::Debug {
    /// Sends `request` and waits `within` for the runs it came to; why
    /// not.
    fn ask(&self, request: Request, within: Duration) -> BoxFuture<'_, Result<Vec<Fired>, String>>;
}

/// A run's hooks run by its lead, as a worker holds them.
#[derive(Clone, Debug)]
pub(super) struct Lead {
    groups: Vec<Asked>,
    asker: Arc<dyn Asker>,
}

/// One group of them.
#[derive(Clone, Debug)]
struct Asked {
    event: HookEvent,
    matcher: Option<regex::Regex>,
    timeout: Duration,
    blocks: bool,
}

impl Lead {
    /// Whether any of them fires at `event`.
    pub(super) fn has(&self, event: HookEvent) -> bool {
        self.groups.iter().any(|g| g.event == event)
    }

    /// Whether any of them fires at `event` for `tool`.
    pub(super) fn fires(&self, event: HookEvent, tool: Option<&str>) -> bool {
        self.matching(event, tool).next().is_some()
    }

    fn matching(&self, event: HookEvent, tool: Option<&str>) -> impl Iterator<Item = &Asked> {
        (self.groups.iter()).filter(move |g| g.event == event && matched(g.matcher.as_ref(), tool))
    }

    /// Asks the lead to run those of `event` for `tool` at `place` with
    /// `fields`: each run. A lead that cannot be asked counts as a hook
    /// that could not run: it blocks when one of them would.
    pub(super) async fn ask(
        &self,
        event: HookEvent,
        tool: Option<&str>,
        place: &Place,
        fields: Value,
    ) -> Vec<Fired> {
        let longest = self.matching(event, tool).map(|g| g.timeout).max();
        let blocks = self.matching(event, tool).any(|g| g.blocks);
        let request = Request {
            event: event.name().to_owned(),
            tool: tool.map(str::to_owned),
            fields,
            cwd: place.cwd.display().to_string(),
            permission_mode: place.permission_mode.clone(),
        };
        let within = longest.unwrap_or_default() + MARGIN;
        match self.asker.ask(request, within).await {
            Ok(fired) => fired,
            Err(why) => {
                let why = format!("the lead's {} hooks did not run: {why}", event.name());
                let answer = Answer::failed(why, blocks);
                vec![Fired {
                    command: "(the lead's hooks)".into(),
                    answer,
                    exit_code: None,
                }]
            }
        }
    }
}

impl Hooks {
    /// What a worker is told of these hooks: the groups that fire for a
    /// sub-agent.
    pub fn shape(&self) -> Vec<Shape> {
        (self.groups.iter())
            .filter(|(event, _)| SUB_AGENT_EVENTS.contains(event))
            .map(|(event, group)| Shape {
                event: event.name().to_owned(),
                matcher: group.matcher().map(str::to_owned),
                timeout_secs: (group.hooks.iter())
                    .map(|h| h.timeout.as_secs().max(1))
                    .max()
                    .unwrap_or(1),
                blocks: group.hooks.iter().any(|h| h.block_on_failure),
            })
            .collect()
    }

    /// These hooks with those of a run elsewhere, shaped as `shapes`, which
    /// its lead runs when `asker` asks; why `shapes` do not read.
    pub fn with_lead(&self, shapes: &[Shape], asker: Arc<dyn Asker>) -> Result<Self, String> {
        let mut groups = Vec::new();
        for shape in shapes {
            let event = HookEvent::named(&shape.event)
                .filter(|e| SUB_AGENT_EVENTS.contains(e))
                .ok_or_else(|| format!("its lead's hooks name the event {:?}", shape.event))?;
            let matcher = match &shape.matcher {
                Some(pattern) => Some(
                    regex::RegexBuilder::new(pattern)
                        .size_limit(MATCHER_SIZE)
                        .build()
                        .map_err(|e| format!("its lead's hook matcher {pattern:?}: {e}"))?,
                ),
                None => None,
            };
            groups.push(Asked {
                event,
                matcher,
                timeout: Duration::from_secs(shape.timeout_secs.clamp(1, 3600)),
                blocks: shape.blocks,
            });
        }
        Ok(Self {
            lead: (!groups.is_empty()).then(|| Lead { groups, asker }),
            ..self.clone()
        })
    }

    /// Runs, for sub-agent `session` of this run on another machine, the
    /// hooks `request` asks for, in this workspace; tells each run to
    /// `tell`. Their input says where they run (`cwd`: this workspace) and
    /// where the sub-agent works there (`worker_cwd`); no transcript here;
    /// its permission mode as the caller read it.
    /// What a worker sends cannot change who or what fired them, nor name a
    /// folder of this machine as theirs.
    pub async fn answer(
        self: &Arc<Self>,
        session: &str,
        request: Request,
        tell: impl Fn(crate::protocol::EventKind),
    ) -> Result<Vec<Fired>, String> {
        let event = HookEvent::named(&request.event)
            .filter(|e| SUB_AGENT_EVENTS.contains(e))
            .ok_or_else(|| format!("no hooks run here for the event {:?}", request.event))?;
        let tool = request.tool.as_deref();
        let Value::Object(mut fields) = request.fields else {
            return Err("the event's fields are not an object".into());
        };
        if event.is_tool_event() {
            let tool = tool.ok_or("a tool's event names no tool")?;
            fields.insert("tool_name".into(), tool.into());
        }
        fields.insert("worker_cwd".into(), request.cwd.into());
        let place = Place {
            session: session.to_owned(),
            cwd: self.project_dir.clone(),
            transcript: None,
            permission_mode: request.permission_mode,
        };
        let input = super::input(event, &place, Value::Object(fields));
        let fired = self.run_here(event, tool, &input, &self.project_dir).await;
        for run in &fired {
            tell(run.event(event));
        }
        Ok(fired)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;

    /// Answers every request with `reply`, keeping what it was asked.
    #[derive(Debug)]
    struct Told {
        reply: Result<Vec<Fired>, String>,
        asked: Mutex<Vec<(Request, Duration)>>,
    }

    impl Asker for Told {
        fn ask(
            &self,
            request: Request,
            within: Duration,
        ) -> BoxFuture<'_, Result<Vec<Fired>, String>> {
            self.asked.lock().unwrap().push((request, within));
            let reply = self.reply.clone();
            Box::pin(async move { reply })
        }
    }

    fn settings(dir: &std::path::Path, settings: &Value) -> Hooks {
        let (groups, _) = super::super::config::parse(dir, settings).unwrap();
        Hooks::new(groups, dir)
    }

    fn place(dir: &std::path::Path) -> Place {
        Place {
            session: "s1".into(),
            cwd: dir.to_owned(),
            transcript: Some(dir.join("journal.jsonl")),
            permission_mode: "acceptEdits".into(),
        }
    }

    #[test]
    fn a_worker_is_told_when_the_hooks_fire_for_a_sub_agent_and_never_what_they_run() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = settings(
            dir.path(),
            &json!({"hooks": {
                "PreToolUse": [{"matcher": "Bash|Write", "hooks": [
                    {"type": "command", "command": "secret-guard --token abc", "timeout": 5},
                    {"type": "command", "command": "other", "timeout": 30, "onFailure": "block"}]}],
                "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "lead-only"}]}],
                "SubagentStop": [{"hooks": [{"type": "command", "command": "done"}]}]
            }}),
        );
        let shapes = hooks.shape();
        assert_eq!(
            shapes,
            [
                Shape {
                    event: "PreToolUse".into(),
                    matcher: Some("^(?:Bash|Write)$".into()),
                    timeout_secs: 30,
                    blocks: true,
                },
                Shape {
                    event: "SubagentStop".into(),
                    matcher: None,
                    timeout_secs: 60,
                    blocks: false,
                }
            ]
        );
        assert!(!serde_json::to_string(&shapes).unwrap().contains("secret"));
    }

    #[tokio::test]
    async fn a_worker_asks_its_lead_only_for_what_its_hooks_match_and_tells_each_run() {
        let dir = tempfile::tempdir().unwrap();
        let fired = Fired {
            command: "guard".into(),
            answer: Answer {
                block: Some("not here".into()),
                ..Answer::default()
            },
            exit_code: Some(2),
        };
        let told = Arc::new(Told {
            reply: Ok(vec![fired.clone()]),
            asked: Mutex::default(),
        });
        let shapes = [Shape {
            event: "PreToolUse".into(),
            matcher: Some("^(?:Bash)$".into()),
            timeout_secs: 7,
            blocks: false,
        }];
        let hooks = Arc::new(Hooks::default().with_lead(&shapes, told.clone()).unwrap());
        assert!(hooks.has(HookEvent::PreToolUse) && !hooks.has(HookEvent::PostToolUse));
        let events = Mutex::new(Vec::new());
        let tell = |kind| events.lock().unwrap().push(kind);
        let fields = json!({"tool_name": "Read", "tool_input": {}});
        let read = hooks
            .fire(
                HookEvent::PreToolUse,
                Some("Read"),
                &place(dir.path()),
                fields,
                &tell,
            )
            .await;
        assert_eq!(read, Answer::default());
        assert!(
            told.asked.lock().unwrap().is_empty(),
            "Read matches nothing"
        );
        let fields = json!({"tool_name": "Bash", "tool_input": {"command": "ls"}});
        let bash = hooks
            .fire(
                HookEvent::PreToolUse,
                Some("Bash"),
                &place(dir.path()),
                fields.clone(),
                &tell,
            )
            .await;
        assert_eq!(bash.block.as_deref(), Some("not here"));
        let asked = told.asked.lock().unwrap();
        let (request, within) = &asked[0];
        assert_eq!(
            (
                request.event.as_str(),
                request.tool.as_deref(),
                &request.fields
            ),
            ("PreToolUse", Some("Bash"), &fields)
        );
        assert_eq!(*within, Duration::from_secs(7) + MARGIN);
        assert_eq!(events.lock().unwrap().len(), 1, "its run is told here");
    }

    #[tokio::test]
    async fn a_lead_that_cannot_be_asked_blocks_only_where_a_hook_would() {
        let dir = tempfile::tempdir().unwrap();
        for blocks in [false, true] {
            let told = Arc::new(Told {
                reply: Err("no answer within 70s".into()),
                asked: Mutex::default(),
            });
            let shapes = [Shape {
                event: "PostToolUse".into(),
                matcher: None,
                timeout_secs: 60,
                blocks,
            }];
            let hooks = Arc::new(Hooks::default().with_lead(&shapes, told).unwrap());
            let answer = hooks
                .fire(
                    HookEvent::PostToolUse,
                    Some("Bash"),
                    &place(dir.path()),
                    json!({}),
                    |_| {},
                )
                .await;
            let said = answer.block.clone().or(answer.notice.clone()).unwrap();
            assert_eq!(answer.block.is_some(), blocks);
            assert!(
                said.contains("the lead's PostToolUse hooks did not run: no answer"),
                "{said}"
            );
        }
    }

    #[test]
    fn shapes_that_do_not_read_are_refused() {
        let asker: Arc<dyn Asker> = Arc::new(Told {
            reply: Ok(Vec::new()),
            asked: Mutex::default(),
        });
        let shape = |event: &str, matcher: Option<&str>| Shape {
            event: event.into(),
            matcher: matcher.map(str::to_owned),
            timeout_secs: 1,
            blocks: false,
        };
        let lead_only =
            Hooks::default().with_lead(&[shape("UserPromptSubmit", None)], asker.clone());
        assert!(lead_only.unwrap_err().contains("UserPromptSubmit"));
        let bad = Hooks::default().with_lead(&[shape("PreToolUse", Some("("))], asker.clone());
        assert!(
            bad.unwrap_err()
                .starts_with("its lead's hook matcher \"(\"")
        );
        let huge = format!("(?:{}){{1000}}", "a".repeat(200));
        let huge = Hooks::default().with_lead(&[shape("PreToolUse", Some(&huge))], asker);
        assert!(huge.is_err(), "a matcher past the size bound");
    }

    #[tokio::test]
    async fn the_lead_runs_a_workers_hooks_here_with_who_and_what_its_own() {
        let dir = tempfile::tempdir().unwrap();
        // The hook prints its input and where it ran.
        let hooks = Arc::new(settings(
            dir.path(),
            &json!({"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "cat >input.json; pwd >where"}]}]}}),
        ));
        let request = Request {
            event: "PostToolUse".into(),
            tool: Some("Bash".into()),
            fields: json!({
                "tool_name": "Read", "tool_input": {"command": "ls"}, "tool_response": "a",
                "session_id": "forged", "transcript_path": "/etc/shadow",
                "hook_event_name": "Stop"
            }),
            cwd: "/tmp/orchestrate-worker-1/s1".into(),
            permission_mode: "default".into(),
        };
        let events = Mutex::new(Vec::new());
        let tell = |kind| events.lock().unwrap().push(kind);
        let fired = hooks.answer("s9", request.clone(), tell).await.unwrap();
        assert_eq!(fired.len(), 1);
        assert_eq!(events.lock().unwrap().len(), 1);
        let input: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("input.json")).unwrap())
                .unwrap();
        assert_eq!(input["session_id"], "s9");
        assert_eq!(input["tool_name"], "Bash");
        assert_eq!(input["hook_event_name"], "PostToolUse");
        assert_eq!(input["cwd"], dir.path().display().to_string());
        assert_eq!(input["worker_cwd"], "/tmp/orchestrate-worker-1/s1");
        assert!(input.get("transcript_path").is_none());
        assert_eq!(input["tool_input"]["command"], "ls");
        let ran_in = std::fs::read_to_string(dir.path().join("where")).unwrap();
        assert_eq!(
            std::path::Path::new(ran_in.trim()).canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
        // Only a sub-agent's events.
        let lead_only = Request {
            event: "UserPromptSubmit".into(),
            ..request
        };
        let refused = hooks.answer("s9", lead_only, |_| {}).await.unwrap_err();
        assert!(refused.contains("UserPromptSubmit"), "{refused}");
    }
}
