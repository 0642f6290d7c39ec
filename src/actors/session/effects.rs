//! How a Session carries out its machine's effects: journal and queue calls,
//! events, and the children it spawns (one LlmStream per model turn, one
//! ToolRunner per tool call). What the machine must hear back (an answer, a
//! failure) is returned as an input.

use ractor::{Actor, ActorRef};
use tokio_util::sync::CancellationToken;

use super::llm_stream::{LlmStreamActor, LlmStreamArgs, LlmStreamMsg};
use super::tool_runner::{ToolRunnerActor, ToolRunnerArgs};
use super::{SessionMsg, SessionState};
use crate::conversation::{ToolCall, ToolResult};
use crate::error::SessionError;
use crate::session::machine::{Effect, Input, ToolDone};
use crate::tools::permissions::Gate;
use crate::tools::{Changes, Spent, ToolContext};

impl SessionState {
    /// Carries out one effect; returns what the machine must hear about it.
    pub(super) async fn carry_out(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        effect: Effect,
    ) -> Option<Input> {
        match effect {
            Effect::Journal(records) => {
                let appended = self.env.journal.append_all(&self.journal_path, &records);
                appended.err().map(|e| {
                    tracing::error!(session = %self.id, error = %e, "cannot journal");
                    Input::Failed(SessionError::Journal(e))
                })
            }
            Effect::Sync => {
                let synced = self.env.journal.sync_file(&self.journal_path).await;
                Some(Input::Synced(synced))
            }
            Effect::SyncInBackground => {
                self.env.journal.sync_file_soon(&self.journal_path);
                None
            }
            Effect::Publish(kind) => {
                self.publisher.publish(kind);
                None
            }
            Effect::Narrow(narrow) => {
                self.narrowing.add(narrow);
                None
            }
            Effect::StartStream {
                stream,
                request,
                quiet,
            } => {
                let provider = self.spec.provider.as_ref().unwrap_or(&self.env.provider);
                let args = LlmStreamArgs {
                    request,
                    provider: provider.clone(),
                    publisher: self.publisher.clone(),
                    session: myself.clone(),
                    stream_id: stream,
                    quiet,
                };
                match Actor::spawn_linked(None, LlmStreamActor, args, myself.get_cell()).await {
                    Ok((actor, _)) => {
                        self.stream = Some((stream, actor));
                        None
                    }
                    Err(e) => Some(Input::Failed(SessionError::Spawn(e.to_string()))),
                }
            }
            Effect::FallBack => {
                let spec = std::sync::Arc::make_mut(&mut self.spec);
                if let Some(fallback) = spec.fallback.take() {
                    spec.provider = fallback.provider;
                    spec.model = fallback.model;
                    spec.model_info = fallback.model_info;
                }
                None
            }
            Effect::CancelStream { stream } => {
                if let Some((current, actor)) = &self.stream
                    && *current == stream
                {
                    let _ = actor.cast(LlmStreamMsg::Cancel);
                }
                None
            }
            Effect::RetryAfter { stream, delay } => {
                myself.send_after(delay, move || SessionMsg::Retry { stream_id: stream });
                None
            }
            Effect::StartTool {
                turn,
                index,
                call,
                resumed,
            } => self.start_tool(myself, turn, index, call, resumed).await,
            Effect::CancelTools { turn } => {
                if let Some((current, token, _)) = &self.tool_turn
                    && *current == turn
                {
                    token.cancel();
                }
                None
            }
            Effect::Charge { usage, cost } => {
                if let Some(meter) = &self.spec.meter {
                    meter.charge(&usage, cost);
                }
                None
            }
            Effect::Alarm { run, after } => {
                myself.send_after(after, move || SessionMsg::TimeUp { run });
                None
            }
            Effect::TakeOne => {
                let mut queue = self.queue.lock();
                let taken = queue.take_one();
                // Taken, it is a run: busy from now, under the same lock.
                if taken.is_some() {
                    queue.set_running(true);
                }
                Some(Input::Taken(taken.into_iter().collect()))
            }
            Effect::TakeAll => Some(Input::Taken(self.queue.lock().take_to_join())),
            Effect::TakeSteers => {
                let mut queue = self.queue.lock();
                Some(Input::Steers {
                    prompts: queue.take_steers(),
                    background: queue.background_running(),
                })
            }
            Effect::StopHooks { run, active } => self.stop_hooks(myself, run, active),
            Effect::PreCompact => {
                self.pre_compact();
                None
            }
            Effect::Reattach { call, task } => {
                self.reattach(&call, task).await;
                None
            }
            Effect::CountWaiting { seq } => Some(Input::Waiting(self.queue.lock().waiting(seq))),
            Effect::CancelDone { seq } => {
                self.queue.lock().cancel_done(seq);
                None
            }
            Effect::PullLater => {
                let _ = myself.cast(SessionMsg::PullQueue);
                None
            }
            Effect::Stop => {
                myself.stop(Some("stopped".into()));
                None
            }
            #[cfg(feature = "test-support")]
            Effect::Crash(point) => panic!("{}", point.panic_message()),
        }
    }

    /// Spawns a ToolRunner for one call of tool turn `turn`.
    async fn start_tool(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        turn: u64,
        index: usize,
        call: ToolCall,
        resumed: bool,
    ) -> Option<Input> {
        let (cancel, refused) = match &self.tool_turn {
            Some((current, token, refused)) if *current == turn => (token.clone(), refused.clone()),
            Some(_) | None => {
                let (token, refused) = (CancellationToken::new(), std::sync::Arc::default());
                self.tool_turn = Some((turn, token.clone(), std::sync::Arc::clone(&refused)));
                (token, refused)
            }
        };
        let spec = &self.spec;
        let args = ToolRunnerArgs {
            turn_seq: turn,
            index,
            tool: spec.tools.get(&call.name),
            ctx: ToolContext {
                refused_in_turn: refused,
                ..self.tool_context(call.id.clone(), cancel, resumed)
            },
            timeout: spec.tools.timeout(),
            gate: self.gate(),
            session: myself.clone(),
            call: call.clone(),
        };
        match Actor::spawn_linked(None, ToolRunnerActor, args, myself.get_cell()).await {
            Ok((runner, _)) => {
                self.runners.insert(runner.get_id(), (turn, index, call.id));
                None
            }
            Err(e) => Some(tool_error(
                turn,
                index,
                call.id,
                &format!("the tool could not be started: {e}"),
            )),
        }
    }
}

impl SessionState {
    /// The context of call `call_id` of this session: where it works, what
    /// it may touch, where it reports.
    pub(super) fn tool_context(
        &self,
        call_id: String,
        cancel: CancellationToken,
        resumed: bool,
    ) -> ToolContext {
        let spec = &self.spec;
        ToolContext {
            workspace: self.place.workspace.clone(),
            checkout: self.place.checkout.clone(),
            // A private checkout's changes are not the workspace's.
            checkpoints: match self.place.checkout {
                Some(_) => None,
                None => spec.checkpoints.clone(),
            },
            run: self.place.run,
            private: self.env.private.clone(),
            read_deny: crate::tools::ReadDeny::new(
                self.place.rules.clone(),
                spec.deny_rules.clone(),
            ),
            session: self.id,
            files: self.env.files.clone(),
            call_id,
            cancel,
            changes: Changes::default(),
            spent: Spent::default(),
            events: Some(self.publisher.clone()),
            resumed,
            read_roots: self.env.read_roots.clone(),
            reattach: None,
            narrowing: self.narrowing.clone(),
            trees: self.env.trees.clone(),
            refused_in_turn: std::sync::Arc::default(),
        }
    }

    /// Runs the PreCompact hooks in a task of their own (they cannot hold the
    /// compaction up); their runs are told as the session's events.
    fn pre_compact(&self) {
        use crate::hooks::HookEvent;
        if !self.hooks().has(HookEvent::PreCompact) {
            return;
        }
        let (hooks, publisher, place) = (
            self.hooks().clone(),
            self.publisher.clone(),
            self.hook_place(),
        );
        tokio::spawn(async move {
            let fields = serde_json::json!({ "trigger": "auto", "custom_instructions": "" });
            let tell = |kind| publisher.publish(kind);
            (hooks.fire(HookEvent::PreCompact, Some("auto"), &place, fields, tell)).await;
        });
    }

    /// The hooks this session runs: its runtime's, or those its spec brings.
    fn hooks(&self) -> &std::sync::Arc<crate::hooks::Hooks> {
        self.spec.hooks.as_ref().unwrap_or(&self.env.hooks)
    }

    /// Where this session's hooks run, as their input says.
    fn hook_place(&self) -> crate::hooks::Place {
        crate::hooks::Place {
            session: self.id.to_string(),
            cwd: self.place.workspace.clone(),
            transcript: Some(self.journal_path.clone()),
            permission_mode: self.spec.permission_mode.name().to_owned(),
        }
    }

    /// Runs the Stop hooks (SubagentStop for a sub-agent) in a task of their
    /// own, which answers the session when they are done; at once when there
    /// are none.
    fn stop_hooks(&self, myself: &ActorRef<SessionMsg>, run: u64, active: bool) -> Option<Input> {
        use crate::hooks::HookEvent;
        let event = match (self.spec.parent, &self.spec.hooks) {
            (Some(_), _) | (_, Some(_)) => HookEvent::SubagentStop,
            (None, None) => HookEvent::Stop,
        };
        if !self.hooks().has(event) {
            return Some(Input::StopHooked { run, block: None });
        }
        let hooks = self.hooks().clone();
        let place = self.hook_place();
        let publisher = self.publisher.clone();
        let session = myself.clone();
        tokio::spawn(async move {
            let fields = serde_json::json!({ "stop_hook_active": active });
            let tell = |kind| publisher.publish(kind);
            let answer = hooks.fire(event, None, &place, fields, tell).await;
            let _ = session.cast(SessionMsg::StopHooked {
                run,
                block: answer.block,
            });
        });
        None
    }

    /// Makes the Task call `call` again, as resumed, to follow background
    /// sub-agent `task` again; it returns once the sub-agent is followed.
    async fn reattach(&self, call: &ToolCall, task: crate::protocol::SessionId) {
        let Some(tool) = self.spec.tools.get(&call.name) else {
            return;
        };
        let mut ctx = self.tool_context(call.id.clone(), CancellationToken::new(), true);
        ctx.reattach = Some(task);
        let input = call.parsed_arguments().unwrap_or_default();
        if let Err(error) = tool.call(input, &ctx).await {
            tracing::warn!(session = %self.id, %task, %error, "a background sub-agent could not be followed again");
        }
    }

    /// The permission gate of this session's calls: its mode, its role's
    /// rules, the run's rules re-rooted where it works.
    pub(super) fn gate(&self) -> Gate {
        let spec = &self.spec;
        Gate {
            mode: spec.permission_mode,
            agent: spec.agent.clone(),
            approver: self.env.approver.clone(),
            remembered: self.env.remembered.clone(),
            questions: self.env.questions.clone(),
            approval_timeout: self.env.approval_timeout,
            events: Some(self.publisher.clone()),
            bash_rules: spec.bash_rules.clone(),
            role_deny: spec.deny_rules.clone(),
            rules: self.place.rules.clone(),
            saver: self.env.saver.clone(),
            hooks: Some(self.hooks().clone()),
            transcript: Some(self.journal_path.clone()),
        }
    }
}

/// A call that ended without running to completion.
pub(super) fn tool_error(turn: u64, index: usize, call_id: String, why: &str) -> Input {
    Input::ToolDone(ToolDone {
        turn,
        index,
        result: ToolResult {
            tool_call_id: call_id,
            content: format!("Error: {why}"),
            is_error: true,
        },
        changes: Vec::new(),
        spent: Default::default(),
        stop: None,
        narrowed: None,
    })
}
