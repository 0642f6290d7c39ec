//! The `MultiEdit` tool (Claude Code's): several edits to one file, applied in
//! order and atomically: each through Edit's ladder on the result of the ones
//! before, and the file written once, only when every edit applies.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::beneath::Beneath;
use super::edit::{Refusal, creates_new, existing_bytes, refused, replace, size_limit};
use super::files;
use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

/// One edit of a `MultiEdit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OneEdit {
    /// The exact text to replace, including its indentation.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// Input of `MultiEdit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultiEditInput {
    /// The file to edit: absolute, or relative to the workspace root.
    pub file_path: String,
    /// The edits, applied in order, each to the result of the ones before.
    pub edits: Vec<OneEdit>,
}

/// Several edits to one file.
#[derive(Debug)]
pub struct MultiEdit;

impl Tool for MultiEdit {
    fn name(&self) -> &str {
        "MultiEdit"
    }

    fn description(&self) -> &str {
        "Makes several edits to one file in one call: each `{old_string, new_string, \
         replace_all?}` is applied in order to the result of the ones before, with Edit's \
         rules (an exact, unique match unless replace_all). Either every edit applies and the \
         file is written once, or none does and the error says which edit failed. Read the \
         file first. To create a file, give one edit with an empty old_string."
    }

    fn input_schema(&self) -> Value {
        super::schema::<MultiEditInput>()
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
            let input: MultiEditInput = super::parse(input)?;
            if input.edits.is_empty() {
                return Err(ToolError::InvalidInput(
                    "edits is empty: there is nothing to change".into(),
                ));
            }
            let path = ctx.resolve(&input.file_path)?;
            let shown = ctx.display(&path);
            let session = ctx.session;
            let changes = ctx.changes.clone();
            let beneath = ctx.beneath();
            let files_state = ctx.files.clone();
            ctx.files
                .locked(&path.clone(), "edit", &ctx.cancel, move || {
                    let file = (&beneath, path.as_path(), shown.as_str());
                    let summary = apply((session, &files_state), file, &input.edits, &changes)?;
                    files_state.record_read(session, &path);
                    Ok(summary)
                })
                .await
        })
    }
}

/// Applies `edits` to `file` (the workspace, the path, and the path as shown).
fn apply(
    (session, files_state): (crate::protocol::SessionId, &files::FileState),
    (beneath, path, shown): (&Beneath, &std::path::Path, &str),
    edits: &[OneEdit],
    changes: &crate::tools::Changes,
) -> Result<String, ToolError> {
    let numbered = |i: usize, e: ToolError| match e {
        ToolError::Failed(m) | ToolError::InvalidInput(m) => ToolError::Failed(format!(
            "edit {} of {}: {m} (no edit was made)",
            i + 1,
            edits.len()
        )),
        other => other,
    };
    // An empty first old_string creates the file; on a file that is there it is
    // refused as Edit refuses it (a directory is said to be one, below).
    let creating =
        edits[0].old_string.is_empty() && creates_new(path, shown).map_err(|e| numbered(0, e))?;
    // Edit's checks and messages: a directory, a missing file (and the name
    // closest to it), anything but a regular file.
    let mut bytes = if creating {
        edits[0].new_string.clone().into_bytes()
    } else {
        existing_bytes(beneath, path, shown)?
    };
    // The text before and after, as Edit's ladder decodes it (BOM and line
    // endings taken out): a new file's starts empty, with its first edit's text.
    let mut before = None;
    let mut after = if creating {
        edits[0].new_string.replace("\r\n", "\n")
    } else {
        String::new()
    };
    let mut count = 0;
    // Bounded by the file as it was: edits one after another grow no further
    // than one edit may.
    let limit = size_limit(bytes.len());
    for (i, edit) in edits.iter().enumerate().skip(usize::from(creating)) {
        if edit.old_string == edit.new_string {
            let same = ToolError::InvalidInput("old_string and new_string are identical".into());
            return Err(numbered(i, same));
        }
        if edit.old_string.is_empty() {
            let empty = ToolError::InvalidInput(
                "an empty old_string only creates a new file, as the first edit".into(),
            );
            return Err(numbered(i, empty));
        }
        let edited = replace(
            &bytes,
            &edit.old_string,
            &edit.new_string,
            edit.replace_all,
            limit,
        );
        // An existing file is checked fresh once, after its first edit says
        // whether it is text at all (as Edit says a binary file is one before
        // whether it was read); a new one (its first edit skipped) was never read.
        if i == 0 && !matches!(edited, Err(Refusal::Binary | Refusal::NotText)) {
            files_state.check_fresh(session, path, shown)?;
        }
        let edited = edited.map_err(|r| numbered(i, refused(r, shown)))?;
        before.get_or_insert(edited.before);
        bytes = edited.bytes;
        after = edited.after;
        count += edited.count;
    }
    beneath
        .write_atomic(path, &bytes)
        .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
    let before = if creating {
        String::new()
    } else {
        before.unwrap_or_default()
    };
    let diff = super::unified_diff(shown, &before, &after);
    changes.record(shown, &diff);
    let what = if creating {
        format!("Created {shown} with {} edits.", edits.len())
    } else {
        format!(
            "Edited {shown}: {} edits, {count} replacements.",
            edits.len()
        )
    };
    Ok(super::with_diff(what, &diff))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::read::Read;
    use crate::tools::test_context;

    #[tokio::test]
    async fn edits_that_double_a_file_forty_times_are_refused_before_they_grow_it() {
        let (_dir, ctx) = test_context();
        let file = ctx.workspace.join("grow.txt");
        std::fs::write(&file, "x".repeat(64)).unwrap();
        Read.call(json!({"file_path": "grow.txt"}), &ctx)
            .await
            .unwrap();
        // Each edit doubles every x: 2^40 of them would be a terabyte.
        let edits: Vec<_> = (0..40)
            .map(|i| {
                let (old, new) = if i % 2 == 0 { ("x", "yy") } else { ("y", "xx") };
                json!({"old_string": old, "new_string": new, "replace_all": true})
            })
            .collect();
        let refused = MultiEdit
            .call(json!({"file_path": "grow.txt", "edits": edits}), &ctx)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("over the limit of 67108864 (64 MiB, or 16 times the file")
                && refused.contains("(no edit was made)"),
            "{refused}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x".repeat(64));
    }

    #[tokio::test]
    async fn every_edit_applies_in_order_or_none_does() {
        let (_dir, ctx) = test_context();
        let file = ctx.workspace.join("lib.rs");
        std::fs::write(&file, "fn a() {\r\n    1\r\n}\r\nfn b() {}\r\n").unwrap();
        // Unread: refused before anything.
        let unread = MultiEdit
            .call(
                json!({"file_path": "lib.rs", "edits": [{"old_string": "1", "new_string": "2"}]}),
                &ctx,
            )
            .await;
        assert!(unread.is_err());
        Read.call(json!({"file_path": "lib.rs"}), &ctx)
            .await
            .unwrap();
        let out = MultiEdit
            .call(
                json!({"file_path": "lib.rs", "edits": [
                    {"old_string": "    1", "new_string": "    2"},
                    {"old_string": "fn b", "new_string": "fn c"},
                    // The text an earlier edit wrote can be edited again.
                    {"old_string": "    2\n}", "new_string": "    3\n}"},
                ]}),
                &ctx,
            )
            .await
            .unwrap();
        assert!(
            out.starts_with("Edited lib.rs: 3 edits, 3 replacements."),
            "{out}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "fn a() {\r\n    3\r\n}\r\nfn c() {}\r\n",
            "line endings kept"
        );
        let failed = MultiEdit
            .call(
                json!({"file_path": "lib.rs", "edits": [
                    {"old_string": "fn a", "new_string": "fn z"},
                    {"old_string": "no such text", "new_string": "x"},
                ]}),
                &ctx,
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(
            failed.starts_with("edit 2 of 2: old_string was not found in lib.rs"),
            "{failed}"
        );
        assert!(failed.ends_with("(no edit was made)"), "{failed}");
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .starts_with("fn a()"),
            "atomic"
        );
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_edited_is_refused_with_edits_messages() {
        let (_dir, ctx) = test_context();
        std::fs::create_dir(ctx.workspace.join("src")).unwrap();
        std::fs::write(ctx.workspace.join("main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(ctx.workspace.join("blob.bin"), b"\x00\x01\x02").unwrap();
        let refusal = |path: &str, old: &str| {
            let input =
                json!({"file_path": path, "edits": [{"old_string": old, "new_string": "x"}]});
            let ctx = &ctx;
            async move { MultiEdit.call(input, ctx).await.unwrap_err().to_string() }
        };
        assert_eq!(refusal("src", "a").await, "src is a directory");
        assert_eq!(
            refusal("mian.rs", "a").await,
            "mian.rs does not exist. Did you mean main.rs?"
        );
        // Unread, but said to be binary first, as Edit says it.
        assert_eq!(
            refusal("blob.bin", "a").await,
            "edit 1 of 1: blob.bin is a binary file; Edit changes text files only (no edit was made)"
        );
        assert!(refusal("main.rs", "").await.starts_with(
            "edit 1 of 1: main.rs already exists: an empty old_string only creates new files"
        ),);
    }

    #[tokio::test]
    async fn the_diff_of_a_file_with_a_bom_shows_only_the_change() {
        let (_dir, ctx) = test_context();
        std::fs::write(ctx.workspace.join("b.txt"), "\u{feff}one\r\ntwo\r\n").unwrap();
        Read.call(json!({"file_path": "b.txt"}), &ctx)
            .await
            .unwrap();
        let out = MultiEdit
            .call(
                json!({"file_path": "b.txt", "edits": [{"old_string": "two", "new_string": "2"}]}),
                &ctx,
            )
            .await
            .unwrap();
        assert!(out.contains("-two") && out.contains("+2"), "{out}");
        assert!(!out.contains("-one") && !out.contains("\u{feff}"), "{out}");
    }

    #[tokio::test]
    async fn a_first_edit_with_an_empty_old_string_creates_the_file() {
        let (_dir, ctx) = test_context();
        let out = MultiEdit
            .call(
                json!({"file_path": "new.txt", "edits": [
                    {"old_string": "", "new_string": "alpha beta\n"},
                    {"old_string": "beta", "new_string": "gamma"},
                ]}),
                &ctx,
            )
            .await
            .unwrap();
        assert!(out.starts_with("Created new.txt with 2 edits."), "{out}");
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("new.txt")).unwrap(),
            "alpha gamma\n"
        );
        let empty = MultiEdit
            .call(json!({"file_path": "new.txt", "edits": []}), &ctx)
            .await;
        assert!(empty.is_err());
    }
}
