//! The hooks around a tool call: `PreToolUse` before the permission check
//! (a deny refuses the call with its reason, an allow runs it without asking,
//! an ask asks), `PostToolUse` after it ran (a block or context reaches the
//! model with the result). Each hook's run is published (and so journaled)
//! as a `hook_ran` event; a failure or a message for the person as its notice.

use serde_json::{Value, json};

use super::Gate;
use crate::error::ToolError;
use crate::hooks::{Answer, HookEvent, Permission, Place};
use crate::tools::ToolContext;

impl Gate {
    /// Runs the `PreToolUse` hooks of a call of `tool` with `input`: its
    /// decision, or the call's refusal. A hook's `continue: false` refuses
    /// the call and puts its reason in `stop`: the agent ends.
    pub async fn pre_tool_use(
        &self,
        ctx: &ToolContext,
        tool: &str,
        input: &Value,
        stop: &mut Option<String>,
    ) -> Result<Option<Permission>, ToolError> {
        // A call the person's earlier no keeps from running is not one.
        ctx.refused_earlier()?;
        let fields = json!({ "tool_name": tool, "tool_input": input, "tool_use_id": ctx.call_id });
        let answer = self
            .fire(HookEvent::PreToolUse, Some(tool), ctx, fields)
            .await;
        if let Some(reason) = &answer.stop {
            *stop = Some(reason.clone());
            return Err(ToolError::Failed(format!(
                "blocked by a PreToolUse hook, which ends this agent: {reason}"
            )));
        }
        if let Some(reason) = answer.block {
            return Err(ToolError::Failed(format!(
                "blocked by a PreToolUse hook: {reason}"
            )));
        }
        Ok(answer.permission)
    }

    /// Runs the `PostToolUse` hooks of a call of `tool` with `input` that
    /// gave `result`: the result as the model gets it (with what the hooks
    /// said to it). A hook's `continue: false` puts its reason in `stop`: the
    /// agent ends once its turn's calls are done.
    pub async fn post_tool_use(
        &self,
        ctx: &ToolContext,
        tool: &str,
        input: &Value,
        result: String,
        stop: &mut Option<String>,
    ) -> String {
        let fields = json!({
            "tool_name": tool,
            "tool_input": input,
            "tool_response": result,
            "tool_use_id": ctx.call_id,
        });
        let answer = self
            .fire(HookEvent::PostToolUse, Some(tool), ctx, fields)
            .await;
        stop.clone_from(&answer.stop);
        let mut said: Vec<String> = answer.block.into_iter().chain(answer.stop).collect();
        said.extend(answer.context);
        match said.is_empty() {
            true => result,
            false => format!("{result}\n\n[PostToolUse hook: {}]", said.join("\n")),
        }
    }

    /// Runs the `Notification` hooks with `message` (a person is about to be
    /// asked something) without waiting for them: what they answer changes
    /// nothing, and the question is not held up.
    pub(super) fn notify(&self, ctx: &ToolContext, message: String) {
        if !self
            .hooks
            .as_ref()
            .is_some_and(|h| h.has(HookEvent::Notification))
        {
            return;
        }
        let (gate, ctx) = (self.clone(), ctx.clone());
        tokio::spawn(async move {
            let fields = json!({ "message": message });
            gate.fire(HookEvent::Notification, None, &ctx, fields).await;
        });
    }

    /// Runs the hooks of `event` for `tool` (none when the run has none),
    /// publishing each one's run; their answers together.
    async fn fire(
        &self,
        event: HookEvent,
        tool: Option<&str>,
        ctx: &ToolContext,
        fields: Value,
    ) -> Answer {
        let Some(hooks) = &self.hooks else {
            return Answer::default();
        };
        let place = Place {
            session: ctx.session.to_string(),
            cwd: ctx.workspace.clone(),
            transcript: self.transcript.clone(),
            permission_mode: self.mode.name().to_owned(),
        };
        let tell = |kind| {
            if let Some(events) = &self.events {
                events.publish(kind);
            }
        };
        hooks.fire(event, tool, &place, fields, tell).await
    }
}
