//! ToolRunner: one tool call (temporary: never restarted, never replayed). The call
//! runs in a task with a timeout and the turn's cancellation token; a panic inside
//! the tool becomes an error result for the model, not a crash of the session.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::SessionMsg;
use crate::actors::AbortOnDrop;
use crate::conversation::{ToolCall, ToolResult};
use crate::error::ToolError;
use crate::session::machine::ToolDone;
use crate::tools::permissions::Gate;
use crate::tools::{MAX_RESULT_BYTES, Tool, ToolContext};

/// A ToolRunner takes no messages: it runs its call and stops.
#[derive(Debug)]
pub(crate) enum ToolRunnerMsg {}

/// What a ToolRunner needs.
#[derive(Debug)]
pub(crate) struct ToolRunnerArgs {
    /// Which tool turn the call belongs to.
    pub(crate) turn_seq: u64,
    /// The call's position in its turn.
    pub(crate) index: usize,
    pub(crate) call: ToolCall,
    /// `None` when the model asked for a tool that is not offered.
    pub(crate) tool: Option<Arc<dyn Tool>>,
    pub(crate) ctx: ToolContext,
    pub(crate) timeout: Duration,
    /// Decides whether the call may run.
    pub(crate) gate: Gate,
    pub(crate) session: ActorRef<SessionMsg>,
}

/// The ToolRunner actor.
#[derive(Debug)]
pub(crate) struct ToolRunnerActor;

impl Actor for ToolRunnerActor {
    type Msg = ToolRunnerMsg;
    type State = AbortOnDrop;
    type Arguments = ToolRunnerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ToolRunnerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let task = tokio::spawn(async move {
            let mut besides = Besides::default();
            let outcome = run_call(
                args.tool.as_deref(),
                &args.call,
                &args.ctx,
                &args.gate,
                args.timeout,
                &mut besides,
            )
            .await;
            let result = match outcome {
                Ok(content) => ToolResult {
                    tool_call_id: args.call.id.clone(),
                    content: cap(content),
                    is_error: false,
                },
                Err(e) => ToolResult {
                    tool_call_id: args.call.id.clone(),
                    content: cap(e.result_text()),
                    is_error: true,
                },
            };
            let _ = args.session.cast(SessionMsg::ToolDone(ToolDone {
                turn: args.turn_seq,
                index: args.index,
                result,
                changes: args.ctx.changes.take(),
                spent: args.ctx.spent.take(),
                stop: besides.stop,
                narrowed: besides.narrowed,
            }));
            myself.stop(None);
        });
        Ok(AbortOnDrop(task))
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {}
    }
}

/// What a call leaves besides its result, for the session.
#[derive(Debug, Default)]
struct Besides {
    /// A hook ended the agent (`continue: false`), for this reason.
    stop: Option<String>,
    /// The call narrowed the session (a skill loaded).
    narrowed: Option<crate::tools::narrowing::Narrow>,
}

/// Runs `call` of `tool` in `ctx`, as `gate` allows; what it leaves besides
/// its result goes in `besides`.
async fn run_call(
    tool: Option<&dyn Tool>,
    call: &ToolCall,
    ctx: &ToolContext,
    gate: &Gate,
    timeout: Duration,
    besides: &mut Besides,
) -> Result<String, ToolError> {
    let tool = tool.ok_or_else(|| ToolError::UnknownTool(call.name.clone()))?;
    let input = call
        .parsed_arguments()
        .map_err(|e| {
            // The usual cause is an answer cut off by the output-token limit in the
            // middle of a large call: say so, so the model splits it up.
            ToolError::InvalidInput(format!(
                "the arguments are not valid JSON ({e}); if your answer was cut off by the output token limit, make the call smaller"
            ))
        })?;
    // Hooks and asking a person may take a while; a cancel still gets
    // through.
    let hooked = tokio::select! {
        () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        hooked = gate.pre_tool_use(ctx, tool.name(), &input, &mut besides.stop) => hooked?,
    };
    tokio::select! {
        () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        allowed = gate.check(ctx, tool.name(), tool.read_only(), &input, hooked) => allowed?,
    }
    // The run's first call that may change the workspace has a checkpoint
    // taken first (Task's sub-agents' own calls are theirs).
    if let Some(checkpoints) = &ctx.checkpoints
        && !tool.read_only()
        && !tool.bounds_itself()
    {
        // Outside a repository, the file a file tool is about to change.
        let file = matches!(tool.name(), "Write" | "Edit" | "MultiEdit")
            .then(|| {
                input["file_path"]
                    .as_str()
                    .and_then(|p| ctx.resolve(p).ok())
            })
            .flatten();
        let before = async {
            checkpoints.before_first_change().await;
            if let Some(file) = file {
                checkpoints.before_file_change(file).await;
            }
        };
        tokio::select! {
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            () = before => {}
        }
    }
    // The call is made inside the guarded future, so a panic in the synchronous
    // part of an implementation is caught as well.
    let called = input.clone();
    let work = AssertUnwindSafe(async move { tool.call(input, ctx).await }).catch_unwind();
    // A tool that bounds itself (Task: its sub-agent has its own limits, and its
    // wait for a slot must not count) gets no call timeout of its own.
    let limit = (!tool.bounds_itself()).then_some(timeout);
    let timed = async move {
        match limit {
            Some(limit) => tokio::time::timeout(limit, work).await.ok(),
            None => Some(work.await),
        }
    };
    // A tool that ends itself on a cancel, with its output so far, is given a
    // moment to.
    let grace = if tool.ends_on_cancel() {
        CANCEL_GRACE
    } else {
        Duration::ZERO
    };
    let cancelled = async {
        ctx.cancel.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    let result = tokio::select! {
        () = cancelled => Err(ToolError::Cancelled),
        done = timed => match done {
            None => Err(ToolError::Timeout(timeout)),
            Some(Err(panic)) => Err(ToolError::Crashed(crate::actors::panic_message(panic.as_ref()))),
            Some(Ok(result)) => result,
        },
    }?;
    // A call that narrows its session (a skill loaded) does from now on.
    if let Some(narrow) = tool.narrows(&called) {
        ctx.narrowing.add(narrow.clone());
        besides.narrowed = Some(narrow);
    }
    tokio::select! {
        () = ctx.cancel.cancelled() => Ok(result),
        result = gate.post_tool_use(ctx, tool.name(), &called, result.clone(), &mut besides.stop) => Ok(result),
    }
}

/// How long a tool that ends itself on a cancel ([`Tool::ends_on_cancel`]) is
/// waited for once cancelled.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// Cuts `content` at [`MAX_RESULT_BYTES`] (on a character boundary) with a note.
fn cap(mut content: String) -> String {
    if content.len() <= MAX_RESULT_BYTES {
        return content;
    }
    let total = content.len();
    let mut end = MAX_RESULT_BYTES;
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    content.truncate(end);
    content.push_str(&format!(
        "\n[output cut at {end} of {total} bytes; narrow the call to see the rest]"
    ));
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_capped_on_a_character_boundary() {
        assert_eq!(cap("short".into()), "short");
        let long = "é".repeat(MAX_RESULT_BYTES);
        let capped = cap(long);
        assert!(capped.len() < MAX_RESULT_BYTES + 100);
        assert!(capped.ends_with(&format!(
            "of {} bytes; narrow the call to see the rest]",
            MAX_RESULT_BYTES * 2
        )));
    }
}
