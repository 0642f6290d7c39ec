//! The `Edit` tool: replaces exact text in a file this session has read. Every way
//! an edit can go wrong has its own message, so the model can correct itself.

use std::path::Path;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

mod ladder;

pub use self::ladder::{Edited, Refusal, replace, size_limit};
use super::beneath::Beneath;
use super::files;
use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

/// Files longer than this get no "closest passage" suggestion (it would be slow).
const SUGGEST_MAX_LINES: usize = 20_000;

/// Input of `Edit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditInput {
    /// The file to edit: absolute, or relative to the workspace root.
    pub file_path: String,
    /// The exact text to replace, including its indentation. Empty to create a new file.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: bool,
}

/// Replaces text in a file.
#[derive(Debug)]
pub struct Edit;

impl Tool for Edit {
    fn name(&self) -> &str {
        "Edit"
    }

    fn description(&self) -> &str {
        "Replaces `old_string` with `new_string` in a file. `old_string` must match the file \
         exactly (indentation included) and exactly once, unless `replace_all` is true; give \
         enough surrounding lines to make it unique. Read the file first: files this session \
         has not read, or that changed since, are refused. An empty `old_string` creates a \
         new file with `new_string` as its content. Line endings and a byte-order mark are \
         kept as the file had them."
    }

    fn input_schema(&self) -> Value {
        super::schema::<EditInput>()
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
            let input: EditInput = super::parse(input)?;
            let path = ctx.resolve(&input.file_path)?;
            let shown = ctx.display(&path);
            let session = ctx.session;
            let changes = ctx.changes.clone();
            let beneath = ctx.beneath();
            let files_state = ctx.files.clone();
            ctx.files
                .locked(&path.clone(), "edit", &ctx.cancel, move || {
                    let summary = edit(
                        session,
                        &files_state,
                        &beneath,
                        &path,
                        &shown,
                        &input,
                        &changes,
                    )?;
                    files_state.record_read(session, &path);
                    Ok(summary)
                })
                .await
        })
    }
}

fn fail(message: String) -> ToolError {
    ToolError::Failed(message)
}

/// Why an edit of `shown` could not be made, as the model is told.
pub(super) fn refused(refusal: Refusal, shown: &str) -> ToolError {
    match refusal {
        Refusal::Binary => fail(format!(
            "{shown} is a binary file; Edit changes text files only"
        )),
        Refusal::NotText => fail(format!(
            "{shown} is not UTF-8 text; Edit changes UTF-8 text files only"
        )),
        Refusal::NotFound { body, old } => {
            let hint = closest_passage(&body, &old)
                .map(|(line, passage)| {
                    format!(" The closest passage, at line {line}, is:\n{passage}")
                })
                .unwrap_or_default();
            fail(format!("old_string was not found in {shown}.{hint}"))
        }
        Refusal::Ambiguous(n) => fail(format!(
            "old_string occurs {n} times in {shown}: add surrounding lines to make it unique, or set replace_all to replace every one"
        )),
        Refusal::TooLarge { size, limit } => fail(format!(
            "the edit would make {shown} about {size} bytes, over the limit of {limit} (64 MiB, or 16 times the file, whichever is larger)"
        )),
    }
}

fn edit(
    session: crate::protocol::SessionId,
    files_state: &files::FileState,
    beneath: &Beneath,
    path: &Path,
    shown: &str,
    input: &EditInput,
    changes: &crate::tools::Changes,
) -> Result<String, ToolError> {
    if input.old_string == input.new_string {
        return Err(ToolError::InvalidInput(
            "old_string and new_string are identical: there is nothing to change".into(),
        ));
    }
    if input.old_string.is_empty() {
        if !creates_new(path, shown)? {
            return Err(fail(format!("{shown} is a directory")));
        }
        beneath
            .write_atomic(path, input.new_string.as_bytes())
            .map_err(|e| fail(format!("{shown}: {e}")))?;
        let diff = super::unified_diff(shown, "", &input.new_string);
        changes.record_created(shown, &diff);
        return Ok(super::created(shown, &input.new_string));
    }
    let bytes = existing_bytes(beneath, path, shown)?;
    let edited = replace(
        &bytes,
        &input.old_string,
        &input.new_string,
        input.replace_all,
        ladder::size_limit(bytes.len()),
    );
    // A file of the wrong kind is said so before whether it was read.
    if !matches!(edited, Err(Refusal::Binary | Refusal::NotText)) {
        files_state.check_fresh(session, path, shown)?;
    }
    let edited = edited.map_err(|refusal| refused(refusal, shown))?;
    let Edited {
        bytes: out,
        before,
        after,
        count,
    } = edited;
    beneath
        .write_atomic(path, &out)
        .map_err(|e| fail(format!("{shown}: {e}")))?;
    let diff = super::unified_diff(shown, &before, &after);
    changes.record(shown, &diff);
    let times = if count == 1 {
        "1 replacement".to_owned()
    } else {
        format!("{count} replacements")
    };
    Ok(super::with_diff(format!("Edited {shown}: {times}."), &diff))
}

/// The refusal of an empty `old_string` (which creates files) for a file that is
/// there.
pub(super) fn already_exists(shown: &str) -> ToolError {
    fail(format!(
        "{shown} already exists: an empty old_string only creates new files; give the text to replace"
    ))
}

/// Whether an empty old_string creates the file at `path` (one `stat`): it does
/// when nothing is there; a directory is not created over (false: reading it
/// says what it is); any other file is refused as already there.
pub(super) fn creates_new(path: &Path, shown: &str) -> Result<bool, ToolError> {
    match std::fs::metadata(path) {
        Err(_) => Ok(true),
        Ok(meta) if meta.is_dir() => Ok(false),
        Ok(_) => Err(already_exists(shown)),
    }
}

/// The bytes of the file an edit changes, refused as the model is told when it is
/// a directory, missing (with the closest name beside it), or not a regular file
/// (a FIFO or a device is never read: it could block forever or never end).
pub(super) fn existing_bytes(
    beneath: &Beneath,
    path: &Path,
    shown: &str,
) -> Result<Vec<u8>, ToolError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(fail(format!("{shown} is a directory"))),
        Ok(meta) if !meta.is_file() => Err(fail(format!("{shown} is not a regular file"))),
        // Opened beneath the workspace: checked by path above for the message,
        // read through a descriptor that cannot have been led elsewhere.
        Ok(_) => beneath
            .read_bytes(path)
            .map_err(|e| fail(format!("{shown}: {e}"))),
        Err(_) => {
            let hint = closest_name(beneath.root(), path)
                .map(|n| format!(" Did you mean {n}?"))
                .unwrap_or_default();
            Err(fail(format!("{shown} does not exist.{hint}")))
        }
    }
}

/// The name in the same directory closest to the missing one, if any is close.
fn closest_name(root: &Path, path: &Path) -> Option<String> {
    let wanted = path.file_name()?.to_string_lossy().into_owned();
    let dir = path.parent()?;
    let best = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .map(|name| (files::distance(&wanted, &name), name))
        .min()?;
    (best.0 <= (wanted.chars().count() / 3).max(2))
        .then(|| super::sandbox::display(root, &dir.join(best.1)))
}

/// The window of lines most like `wanted`, with its first line number, if any
/// is at least half alike.
fn closest_passage(body: &str, wanted: &str) -> Option<(usize, String)> {
    let lines: Vec<&str> = body.lines().collect();
    if lines.is_empty() || lines.len() > SUGGEST_MAX_LINES {
        return None;
    }
    let height = wanted.lines().count().clamp(1, lines.len());
    // A suggestion is a courtesy: it gets a small time budget, and each comparison
    // a smaller one, so a huge file or a long old_string cannot stall the edit.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(250);
    let mut best: Option<(f32, usize)> = None;
    for start in 0..=lines.len() - height {
        if std::time::Instant::now() > deadline {
            break;
        }
        let window = lines[start..start + height].join("\n");
        let ratio = similar::TextDiff::configure()
            .timeout(std::time::Duration::from_millis(10))
            .diff_chars(window.as_str(), wanted)
            .ratio();
        if best.is_none_or(|(r, _)| ratio > r) {
            best = Some((ratio, start));
        }
    }
    let (ratio, start) = best?;
    (ratio >= 0.5).then(|| (start + 1, lines[start..start + height].join("\n")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::read::Read;
    use crate::tools::test_context;

    async fn read(ctx: &ToolContext, file: &str) {
        Read.call(json!({"file_path": file}), ctx).await.unwrap();
    }

    async fn edit(ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        Edit.call(input, ctx).await
    }

    #[tokio::test]
    async fn a_unique_match_is_replaced_keeping_crlf_and_bom() {
        let (_dir, ctx) = test_context();
        let file = ctx.workspace.join("lib.rs");
        std::fs::write(&file, "\u{feff}fn a() {\r\n    1\r\n}\r\n").unwrap();
        read(&ctx, "lib.rs").await;
        let out = edit(
            &ctx,
            json!({"file_path": "lib.rs", "old_string": "    1\n}", "new_string": "    2\n}"}),
        )
        .await
        .unwrap();
        assert!(out.starts_with("Edited lib.rs: 1 replacement."), "{out}");
        assert!(out.contains("-    1") && out.contains("+    2"), "{out}");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            "\u{feff}fn a() {\r\n    2\r\n}\r\n".as_bytes()
        );
        // The session's own edit counts as read: a second edit needs no new Read.
        edit(
            &ctx,
            json!({"file_path": "lib.rs", "old_string": "fn a", "new_string": "fn b"}),
        )
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn every_rung_of_the_ladder_has_its_own_message() {
        let (_dir, ctx) = test_context();
        let ws = ctx.workspace.clone();
        std::fs::write(ws.join("main.rs"), "let x = 1;\nlet y = 2;\nlet x = 1;\n").unwrap();
        std::fs::write(ws.join("blob.bin"), b"ab\0cd").unwrap();

        let same = edit(
            &ctx,
            json!({"file_path": "main.rs", "old_string": "a", "new_string": "a"}),
        )
        .await;
        assert_eq!(
            same.unwrap_err().to_string(),
            "invalid input: old_string and new_string are identical: there is nothing to change"
        );

        let exists = edit(
            &ctx,
            json!({"file_path": "main.rs", "old_string": "", "new_string": "x"}),
        )
        .await;
        assert_eq!(
            exists.unwrap_err().to_string(),
            "main.rs already exists: an empty old_string only creates new files; give the text to replace"
        );
        let created = edit(
            &ctx,
            json!({"file_path": "new/mod.rs", "old_string": "", "new_string": "pub fn f() {}\n"}),
        )
        .await;
        assert_eq!(created.unwrap(), "Created new/mod.rs (1 lines, 14 bytes).");
        assert_eq!(
            std::fs::read_to_string(ws.join("new/mod.rs")).unwrap(),
            "pub fn f() {}\n"
        );

        let missing = edit(
            &ctx,
            json!({"file_path": "mian.rs", "old_string": "a", "new_string": "b"}),
        )
        .await;
        assert_eq!(
            missing.unwrap_err().to_string(),
            "mian.rs does not exist. Did you mean main.rs?"
        );

        let binary = edit(
            &ctx,
            json!({"file_path": "blob.bin", "old_string": "ab", "new_string": "xy"}),
        )
        .await;
        assert_eq!(
            binary.unwrap_err().to_string(),
            "blob.bin is a binary file; Edit changes text files only"
        );

        let unread = edit(
            &ctx,
            json!({"file_path": "main.rs", "old_string": "y = 2", "new_string": "y = 3"}),
        )
        .await;
        assert_eq!(
            unread.unwrap_err().to_string(),
            "main.rs exists but has not been read in this session: Read it first, then change it"
        );

        read(&ctx, "main.rs").await;
        let not_found = edit(
            &ctx,
            json!({"file_path": "main.rs", "old_string": "let y = 3;", "new_string": "z"}),
        )
        .await;
        assert_eq!(
            not_found.unwrap_err().to_string(),
            "old_string was not found in main.rs. The closest passage, at line 2, is:\nlet y = 2;"
        );

        let many = edit(
            &ctx,
            json!({"file_path": "main.rs", "old_string": "let x = 1;", "new_string": "let x = 9;"}),
        )
        .await;
        assert_eq!(
            many.unwrap_err().to_string(),
            "old_string occurs 2 times in main.rs: add surrounding lines to make it unique, or set replace_all to replace every one"
        );
        let all = edit(
            &ctx,
            json!({"file_path": "main.rs", "old_string": "let x = 1;", "new_string": "let x = 9;", "replace_all": true}),
        )
        .await;
        assert!(all.unwrap().starts_with("Edited main.rs: 2 replacements."));

        std::fs::write(ws.join("main.rs"), "changed behind our back\n").unwrap();
        let stale = edit(
            &ctx,
            json!({"file_path": "main.rs", "old_string": "behind", "new_string": "in front of"}),
        )
        .await;
        assert_eq!(
            stale.unwrap_err().to_string(),
            "main.rs has changed on disk since this session read it: Read it again before changing it"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hundred_sessions_appending_to_one_file_lose_nothing() {
        let (_dir, ctx) = test_context();
        std::fs::write(ctx.workspace.join("log.txt"), "END\n").unwrap();
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                // Each task is a session of its own.
                let ctx = ToolContext { session: crate::protocol::SessionId::new(), ..ctx.clone() };
                tokio::spawn(async move {
                    loop {
                        Read.call(json!({"file_path": "log.txt"}), &ctx).await.unwrap();
                        let input = json!({"file_path": "log.txt", "old_string": "END", "new_string": format!("line {i}\nEND")});
                        match Edit.call(input, &ctx).await {
                            Ok(_) => return,
                            // Another session got there first: read again and retry, as a model would.
                            Err(e) if e.to_string().contains("changed on disk") => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let text = std::fs::read_to_string(ctx.workspace.join("log.txt")).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.pop(), Some("END"));
        lines.sort_unstable();
        let mut expected: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        expected.sort_unstable();
        assert_eq!(lines, expected);
    }

    #[tokio::test]
    async fn a_fifo_is_refused_without_being_read() {
        let (_dir, ctx) = test_context();
        crate::small_file::fifo(&ctx.workspace.join("pipe"));
        let input = json!({"file_path": "pipe", "old_string": "a", "new_string": "b"});
        let refused = tokio::time::timeout(std::time::Duration::from_secs(30), edit(&ctx, input))
            .await
            .expect("Edit of a FIFO returns at once");
        assert_eq!(
            refused.unwrap_err().to_string(),
            "pipe is not a regular file"
        );
    }
}
