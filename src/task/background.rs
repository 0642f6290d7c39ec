//! The tools that follow background sub-agents, with Claude Code's names:
//! `TaskOutput` (a result, or the state and progress so far) and `TaskStop`
//! (stop one as `stop` does). Both reach the run's background sub-agents
//! through the [`super::Launcher`], and only those the calling agent started.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::TaskEnv;
use crate::error::ToolError;
use crate::protocol::SessionId;
use crate::tools::{Concurrency, Tool, ToolContext};

/// How long `TaskOutput` waits by default, in milliseconds.
pub(super) const DEFAULT_WAIT_MS: u64 = 30_000;
/// The longest wait `TaskOutput` takes, in milliseconds.
pub(super) const MAX_WAIT_MS: u64 = 600_000;

/// Input of `TaskOutput`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskOutputInput {
    /// The task id a Task call with run_in_background returned.
    pub(super) task_id: String,
    /// Wait for it to end (default true); false: answer at once.
    #[serde(default = "yes")]
    pub(super) block: bool,
    /// How long to wait, in milliseconds (default 30000, at most 600000).
    #[serde(default)]
    pub(super) timeout: Option<u64>,
}

fn yes() -> bool {
    true
}

/// Input of `TaskStop`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TaskStopInput {
    /// The task id of the background sub-agent to stop.
    pub(super) task_id: String,
}

/// A task id as the model gave it.
fn task_id(id: &str) -> Result<SessionId, ToolError> {
    id.trim().parse().map_err(|_| {
        ToolError::InvalidInput(format!(
            "task_id {id:?} is not a task id; use the one a Task call with run_in_background returned"
        ))
    })
}

/// How long a `TaskOutput` call waits: `None` when it does not block.
pub(super) fn wait(input: &TaskOutputInput) -> Option<Duration> {
    input.block.then(|| {
        let ms = input.timeout.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS);
        Duration::from_millis(ms)
    })
}

/// The `TaskOutput` tool.
#[derive(Debug)]
pub struct TaskOutput {
    env: Arc<TaskEnv>,
}

impl TaskOutput {
    /// `TaskOutput` for the agents of `env`'s run.
    pub fn new(env: Arc<TaskEnv>) -> Self {
        Self { env }
    }
}

impl Tool for TaskOutput {
    fn name(&self) -> &str {
        "TaskOutput"
    }

    fn description(&self) -> &str {
        "Returns the result of a background sub-agent you started (a Task call with \
         run_in_background), its first line the outcome. With block (the default) it waits up to \
         timeout milliseconds for it to end; when it is still running it returns `running` and \
         its progress so far. Its result also joins your conversation by itself when it ends."
    }

    fn input_schema(&self) -> Value {
        crate::tools::schema::<TaskOutputInput>()
    }

    fn read_only(&self) -> bool {
        true
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: TaskOutputInput = crate::tools::parse(input)?;
            let task = task_id(&input.task_id)?;
            let wait = wait(&input);
            let output = (self.env.launcher).output(ctx.session, task, wait, ctx.spent.clone());
            tokio::select! {
                output = output => output,
                _ = ctx.cancel.cancelled() => Err(ToolError::Cancelled),
            }
        })
    }
}

/// The `TaskStop` tool.
#[derive(Debug)]
pub struct TaskStop {
    env: Arc<TaskEnv>,
}

impl TaskStop {
    /// `TaskStop` for the agents of `env`'s run.
    pub fn new(env: Arc<TaskEnv>) -> Self {
        Self { env }
    }
}

impl Tool for TaskStop {
    fn name(&self) -> &str {
        "TaskStop"
    }

    fn description(&self) -> &str {
        "Stops a background sub-agent you started: it ends `partial` at its next turn boundary, \
         and its result (its work so far) comes as a finished one's does."
    }

    fn input_schema(&self) -> Value {
        crate::tools::schema::<TaskStopInput>()
    }

    fn read_only(&self) -> bool {
        false
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: TaskStopInput = crate::tools::parse(input)?;
            let task = task_id(&input.task_id)?;
            self.env.launcher.stop(ctx.session, task)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_output_waits_thirty_seconds_by_default_at_most_ten_minutes_and_not_unless_blocking() {
        let input = |v: Value| serde_json::from_value::<TaskOutputInput>(v).unwrap();
        let id = SessionId::new().to_string();
        let default = input(serde_json::json!({ "task_id": id }));
        assert_eq!(wait(&default), Some(Duration::from_secs(30)));
        let long = input(serde_json::json!({ "task_id": id, "timeout": 3_600_000 }));
        assert_eq!(wait(&long), Some(Duration::from_secs(600)));
        let now = input(serde_json::json!({ "task_id": id, "block": false }));
        assert_eq!(wait(&now), None);
        assert!(task_id("not-an-id").is_err());
        assert_eq!(task_id(&format!(" {id} ")).unwrap().to_string(), id);
    }
}
