//! The `Write` tool: creates a file, or replaces one this session has read.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::files;
use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

/// Input of `Write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteInput {
    /// The file to write: absolute, or relative to the workspace root.
    pub file_path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// Writes a whole file.
#[derive(Debug)]
pub struct Write;

impl Tool for Write {
    fn name(&self) -> &str {
        "Write"
    }

    fn description(&self) -> &str {
        "Writes `content` as the whole content of a file, creating missing parent \
         directories. An existing file may be overwritten only if this session has Read it \
         and it has not changed since. Prefer Edit for changing part of a file."
    }

    fn input_schema(&self) -> Value {
        super::schema::<WriteInput>()
    }

    fn read_only(&self) -> bool {
        false
    }

    /// A cancel stops a write still waiting for its file; one begun is quick
    /// and is waited for, so what it changed is reported.
    fn ends_on_cancel(&self) -> bool {
        true
    }

    fn concurrency(&self, input: &Value) -> Concurrency {
        super::unsafe_on_path(input)
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: WriteInput = super::parse(input)?;
            let path = ctx.resolve(&input.file_path)?;
            let shown = ctx.display(&path);
            let session = ctx.session;
            let changes = ctx.changes.clone();
            let beneath = ctx.beneath();
            let files_state = ctx.files.clone();
            ctx.files
                .locked(&path.clone(), "write", &ctx.cancel, move || {
                    if path.is_dir() {
                        return Err(ToolError::Failed(format!("{shown} is a directory")));
                    }
                    let existed = path.exists();
                    let (old, text) = if existed {
                        files_state.check_fresh(session, &path, &shown)?;
                        let bytes = beneath
                            .read_bytes(&path)
                            .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
                        let old = String::from_utf8_lossy(&bytes).into_owned();
                        (old, files::Text::decode(&bytes))
                    } else {
                        (String::new(), None)
                    };
                    // An existing file keeps its BOM and line endings.
                    let bytes = match &text {
                        Some(text) => text.encode(&input.content),
                        None => input.content.clone().into_bytes(),
                    };
                    beneath
                        .write_atomic(&path, &bytes)
                        .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
                    files_state.record_read(session, &path);
                    let diff = super::unified_diff(&shown, &old, &String::from_utf8_lossy(&bytes));
                    if !existed {
                        changes.record_created(&shown, &diff);
                        return Ok(super::created(&shown, &input.content));
                    }
                    changes.record(&shown, &diff);
                    let lines = input.content.lines().count();
                    Ok(super::with_diff(
                        format!("Updated {shown} ({lines} lines)."),
                        &diff,
                    ))
                })
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::read::Read;
    use crate::tools::test_context;

    #[tokio::test]
    async fn a_new_file_is_created_with_its_directories() {
        let (_dir, ctx) = test_context();
        let out = Write
            .call(
                json!({"file_path": "a/b/c.txt", "content": "hi\nthere\n"}),
                &ctx,
            )
            .await
            .unwrap();
        // The content is the call's own: the result does not repeat it.
        assert_eq!(out, "Created a/b/c.txt (2 lines, 9 bytes).");
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("a/b/c.txt")).unwrap(),
            "hi\nthere\n"
        );
    }

    #[tokio::test]
    async fn an_unread_file_is_not_overwritten_and_a_read_one_is() {
        let (_dir, ctx) = test_context();
        std::fs::write(ctx.workspace.join("keep.txt"), "precious\r\n").unwrap();
        let err = Write
            .call(json!({"file_path": "keep.txt", "content": "gone"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "keep.txt exists but has not been read in this session: Read it first, then change it"
        );
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("keep.txt")).unwrap(),
            "precious\r\n"
        );
        Read.call(json!({"file_path": "keep.txt"}), &ctx)
            .await
            .unwrap();
        let out = Write
            .call(
                json!({"file_path": "keep.txt", "content": "new\nlines\n"}),
                &ctx,
            )
            .await
            .unwrap();
        assert!(out.starts_with("Updated keep.txt (2 lines)."), "{out}");
        assert!(out.contains("-precious"), "{out}");
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("keep.txt")).unwrap(),
            "new\r\nlines\r\n"
        );
    }

    #[tokio::test]
    async fn outside_the_workspace_nothing_is_written() {
        let (dir, ctx) = test_context();
        let target = dir.path().parent().unwrap().join("escaped.txt");
        let err = Write
            .call(
                json!({"file_path": target.to_str().unwrap(), "content": "x"}),
                &ctx,
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("outside the workspace"));
        assert!(!target.exists());
    }
}
