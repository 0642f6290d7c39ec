//! The `TodoWrite` tool (Claude Code's): the agent's todo list, replaced whole by
//! each call. The list is published as a `todos` event (shown on the agent's
//! progress row as `2/5`, in `--json`, and in the summary), and echoed back.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ToolError;
use crate::protocol::{EventKind, Todo, TodoStatus};
use crate::tools::{Concurrency, Tool, ToolContext};

/// Items a list may hold.
const MAX_ITEMS: usize = 100;

/// Input of `TodoWrite`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TodoWriteInput {
    /// The whole updated list.
    todos: Vec<Todo>,
}

/// Keeps the agent's todo list.
#[derive(Debug)]
pub struct TodoWrite;

impl Tool for TodoWrite {
    fn name(&self) -> &str {
        "TodoWrite"
    }

    fn description(&self) -> &str {
        "Keeps your todo list for this task: send the whole updated list each time. Use it \
         for work of three steps or more: write the steps, mark one `in_progress` before you \
         start it, and `completed` as soon as it is done. The person sees the list and your \
         progress through it."
    }

    fn input_schema(&self) -> Value {
        super::schema::<TodoWriteInput>()
    }

    fn read_only(&self) -> bool {
        true
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        // Two lists in one turn: the later one must be the one shown.
        Concurrency::Unsafe {
            resources: vec!["todos".to_owned()],
        }
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: TodoWriteInput = super::parse(input)?;
            let todos = input.todos;
            if todos.len() > MAX_ITEMS {
                return Err(ToolError::InvalidInput(format!(
                    "a todo list holds at most {MAX_ITEMS} items, not {}",
                    todos.len()
                )));
            }
            if let Some(blank) = todos.iter().position(|t| t.content.trim().is_empty()) {
                return Err(ToolError::InvalidInput(format!(
                    "item {} has no content",
                    blank + 1
                )));
            }
            let text = render(&todos);
            if let Some(events) = &ctx.events {
                events.publish(EventKind::Todos { todos });
            }
            Ok(format!("The todo list is updated:\n{text}"))
        })
    }
}

/// The list as text, one item a line with its mark.
fn render(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "(empty)".to_owned();
    }
    todos
        .iter()
        .map(|t| {
            let mark = match t.status {
                TodoStatus::Completed => "[x]",
                TodoStatus::InProgress => "[>]",
                TodoStatus::Pending => "[ ]",
            };
            format!("{mark} {}", t.content)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::test_context;

    #[tokio::test]
    async fn the_list_is_echoed_and_bad_lists_are_refused() {
        let (_dir, ctx) = test_context();
        let out = TodoWrite
            .call(
                json!({"todos": [
                    {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
                    {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
                    {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"},
                ]}),
                &ctx,
            )
            .await
            .unwrap();
        assert_eq!(
            out,
            "The todo list is updated:\n[x] Read the code\n[>] Fix the bug\n[ ] Run the tests"
        );
        let blank = TodoWrite
            .call(
                json!({"todos": [{"content": " ", "status": "pending"}]}),
                &ctx,
            )
            .await;
        assert!(
            blank
                .unwrap_err()
                .to_string()
                .contains("item 1 has no content")
        );
        let bad = TodoWrite
            .call(
                json!({"todos": [{"content": "x", "status": "later"}]}),
                &ctx,
            )
            .await;
        assert!(bad.is_err());
    }
}
