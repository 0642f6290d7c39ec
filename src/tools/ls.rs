//! The `Ls` tool: lists the entries of one directory of the workspace. It does not
//! recurse or apply .gitignore (that is `Glob`).

use std::ffi::OsString;
use std::io::ErrorKind;

use futures::future::BoxFuture;
use globset::{Glob, GlobSetBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

/// Entries shown at most; the model is told how many more there were.
const MAX_ENTRIES: usize = 1000;

const DESCRIPTION: &str = "\
Lists the entries of one directory (the workspace root by default), sorted by name, \
directories marked with a trailing `/`. Hidden entries are included; .gitignore is not \
applied. Not recursive: to find files at any depth use Glob, to search their contents \
use Grep. `ignore` takes glob patterns of names to leave out, e.g. [\"*.log\", \
\"node_modules\"]. At most 1000 entries are shown, then a note says how many more there \
were.";

/// Input of `Ls`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LsInput {
    /// The directory to list. Defaults to the workspace root.
    path: Option<String>,
    /// Glob patterns of entry names to leave out, e.g. `["*.log", "node_modules"]`.
    ignore: Option<Vec<String>>,
}

/// Lists one directory.
#[derive(Debug)]
pub struct Ls;

impl Tool for Ls {
    fn name(&self) -> &str {
        "Ls"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        super::schema::<LsInput>()
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
            let input: LsInput = super::parse(input)?;
            let mut ignore = GlobSetBuilder::new();
            for pattern in input.ignore.iter().flatten() {
                let glob = Glob::new(pattern.trim_end_matches('/')).map_err(|e| {
                    ToolError::InvalidInput(format!("bad ignore pattern {pattern:?}: {e}"))
                })?;
                ignore.add(glob);
            }
            let ignore = ignore
                .build()
                .map_err(|e| ToolError::InvalidInput(e.to_string()))?;
            let dir = match input.path.as_deref().filter(|p| !p.is_empty()) {
                Some(path) => ctx.resolve(path)?,
                None => ctx.workspace.clone(),
            };
            let shown = match ctx.display(&dir) {
                root if root.is_empty() => ".".to_owned(),
                shown => shown,
            };
            let denied = ctx.read_deny.clone();
            let beneath = ctx.beneath();
            super::blocking(move || {
                // Listed from a descriptor opened beneath the workspace: a folder
                // swapped for a link out meanwhile is not listed.
                let read = beneath.list(&dir).map_err(|e| {
                    ToolError::Failed(match e.kind() {
                        ErrorKind::NotFound => format!("{shown}: no such directory"),
                        ErrorKind::NotADirectory => format!(
                            "{shown} is a file, not a directory; use Read to see its contents"
                        ),
                        _ => format!("{shown}: {e}"),
                    })
                })?;
                let mut names: Vec<OsString> = Vec::new();
                let mut left_out = 0;
                for name in read {
                    // What a Read deny rule refuses is not named either.
                    if denied.denies(&dir.join(&name)) {
                        continue;
                    }
                    if ignore.is_match(&name) {
                        left_out += 1;
                    } else {
                        names.push(name);
                    }
                }
                if names.is_empty() {
                    return Ok(if left_out == 0 {
                        format!("{shown}/ is empty")
                    } else {
                        format!(
                            "{shown}/ has no entries besides the {left_out} left out by `ignore`"
                        )
                    });
                }
                names.sort();
                // Only the entries shown are looked at, so a huge directory stays cheap.
                let mut out: Vec<String> = names
                    .iter()
                    .take(MAX_ENTRIES)
                    .map(|name| {
                        // Following a link: a link to a directory is listed as one.
                        let is_dir = dir.join(name).is_dir();
                        let name = name.to_string_lossy();
                        if is_dir {
                            format!("{name}/")
                        } else {
                            name.into_owned()
                        }
                    })
                    .collect();
                if names.len() > MAX_ENTRIES {
                    let more = names.len() - MAX_ENTRIES;
                    out.push(format!(
                        "[{more} more entries not shown; list a subdirectory, or find files \
                         with Glob]"
                    ));
                }
                Ok(out.join("\n"))
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::SessionId;

    /// A workspace `ws` inside a temporary directory (so `../outside` exists), holding
    /// `a/`, `A.md`, `b.txt`, `.hidden` and `c.log`.
    fn workspace() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(workspace.join("a/deeper")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        for name in ["A.md", "b.txt", ".hidden", "c.log", "a/inner.rs"] {
            std::fs::write(workspace.join(name), "").unwrap();
        }
        let ctx = ToolContext::new(workspace, SessionId::new());
        (dir, ctx)
    }

    async fn ls(ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        Ls.call(input, ctx).await
    }

    #[tokio::test]
    async fn lists_one_directory_sorted_with_directories_marked() {
        let (_d, ctx) = workspace();
        let root = ls(&ctx, json!({})).await.unwrap();
        assert_eq!(root, ".hidden\nA.md\na/\nb.txt\nc.log");
        let sub = ls(&ctx, json!({"path": "a"})).await.unwrap();
        assert_eq!(sub, "deeper/\ninner.rs");
        let empty = ls(&ctx, json!({"path": "a/deeper"})).await.unwrap();
        assert_eq!(empty, "a/deeper/ is empty");
    }

    #[tokio::test]
    async fn a_link_to_a_directory_is_listed_as_one() {
        let (_d, ctx) = workspace();
        std::os::unix::fs::symlink(ctx.workspace.join("a"), ctx.workspace.join("link")).unwrap();
        let out = ls(&ctx, json!({"path": "."})).await.unwrap();
        assert_eq!(out, ".hidden\nA.md\na/\nb.txt\nc.log\nlink/");
    }

    #[tokio::test]
    async fn ignore_patterns_leave_entries_out() {
        let (_d, ctx) = workspace();
        let out = ls(&ctx, json!({"ignore": ["*.log", "a/", ".*"]}))
            .await
            .unwrap();
        assert_eq!(out, "A.md\nb.txt");
        let all = ls(&ctx, json!({"ignore": ["*"]})).await.unwrap();
        assert_eq!(all, "./ has no entries besides the 5 left out by `ignore`");
        let err = ls(&ctx, json!({"ignore": ["a["]})).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err}");
    }

    #[tokio::test]
    async fn caps_at_one_thousand_entries() {
        let (_d, ctx) = workspace();
        let many = ctx.workspace.join("many");
        std::fs::create_dir(&many).unwrap();
        for i in 0..1005 {
            std::fs::write(many.join(format!("f{i:04}")), "").unwrap();
        }
        let out = ls(&ctx, json!({"path": "many"})).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1001);
        assert_eq!(lines[999], "f0999");
        assert_eq!(
            lines[1000],
            "[5 more entries not shown; list a subdirectory, or find files with Glob]"
        );
    }

    #[tokio::test]
    async fn files_missing_paths_and_paths_outside_are_errors() {
        let (_d, ctx) = workspace();
        let err = ls(&ctx, json!({"path": "b.txt"})).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "b.txt is a file, not a directory; use Read to see its contents"
        );
        let err = ls(&ctx, json!({"path": "nope"})).await.unwrap_err();
        assert_eq!(err.to_string(), "nope: no such directory");
        let err = ls(&ctx, json!({"path": "../outside"})).await.unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
    }
}
