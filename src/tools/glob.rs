//! The `Glob` tool: finds files by a glob on their path, newest first. It does not
//! read contents (that is `Grep`) or list one directory (`Ls`); the walk it shares
//! with `Grep` is `walk`.

use std::path::Path;

use futures::future::BoxFuture;
use globset::GlobBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::walk::{self, Walk, newest_first};
use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

/// Paths shown at most; the model is told how many more there were.
const MAX_RESULTS: usize = 100;

const DESCRIPTION: &str = "\
Finds files whose path matches a glob pattern and returns their paths (relative to the \
workspace), most recently modified first.

- The pattern is matched against each file's path relative to `path` (a directory; the \
workspace root by default). `*` does not cross `/`: `*.toml` matches only files directly \
in `path`; use `**/` to match at any depth, e.g. `**/*.rs`, `src/**/*.{ts,tsx}`, \
`**/test_*.py`.
- Files ignored by .gitignore or .ignore are skipped, as is the .git directory. Hidden \
files are included.
- At most 100 paths are returned; when there are more, the output says how many. Narrow \
with a more specific pattern or a deeper `path`.
- To search inside files use Grep; to list one directory use Ls.";

/// Input of `Glob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GlobInput {
    /// The glob to match file paths against, relative to `path`: `**/*.rs`,
    /// `src/**/*.{ts,tsx}`, `*.toml` (directly in `path` only).
    pattern: String,
    /// The directory to search in. Defaults to the workspace root.
    path: Option<String>,
}

/// Finds files by name pattern.
#[derive(Debug)]
pub struct Glob;

impl Tool for Glob {
    fn name(&self) -> &str {
        "Glob"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        super::schema::<GlobInput>()
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
            let input: GlobInput = super::parse(input)?;
            let pattern = input.pattern.trim_start_matches("./");
            if Path::new(pattern).is_absolute() {
                return Err(ToolError::InvalidInput(format!(
                    "the pattern {pattern:?} is absolute; give the directory as `path` and a \
                     pattern relative to it"
                )));
            }
            let matcher = GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| ToolError::InvalidInput(e.to_string()))?
                .compile_matcher();
            let dir = match input.path.as_deref().filter(|p| !p.is_empty()) {
                Some(path) => ctx.resolve(path)?,
                None => ctx.workspace.clone(),
            };
            if !dir.is_dir() {
                let shown = ctx.display(&dir);
                return Err(ToolError::Failed(if dir.exists() {
                    format!("{shown} is a file, not a directory; give a directory as `path`")
                } else {
                    format!("{shown}: no such directory")
                }));
            }
            let (cancel, private, denied) = (
                ctx.cancel.clone(),
                ctx.private.clone(),
                ctx.read_deny.clone(),
            );
            let walked = super::blocking(move || {
                Walk::new(&dir, private, denied).files(&cancel, |path| {
                    matcher.is_match(path.strip_prefix(&dir).unwrap_or(path))
                })
            })
            .await?;
            let warnings = walk::warnings(&walked.skipped, ctx);
            let found = newest_first(walked.files);
            let mut out: Vec<String> = found
                .iter()
                .take(MAX_RESULTS)
                .map(|p| ctx.display(p))
                .collect();
            if found.is_empty() {
                out.push("No files found".into());
            }
            if found.len() > MAX_RESULTS {
                let more = found.len() - MAX_RESULTS;
                out.push(format!(
                    "[{more} more files not shown; narrow the search with a more specific \
                     pattern or path]"
                ));
            }
            out.extend(warnings);
            Ok(out.join("\n"))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use serde_json::json;

    use super::*;
    use crate::protocol::SessionId;

    /// A workspace `ws` inside a temporary directory (so `../outside` exists).
    fn workspace() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        let ctx = ToolContext::new(workspace, SessionId::new());
        (dir, ctx)
    }

    /// Writes `files` under the workspace, each modified `i` seconds after the epoch
    /// plus a day, so later files in the list are newer.
    fn write(ctx: &ToolContext, files: &[&str]) {
        for (i, name) in (0u64..).zip(files) {
            let path = ctx.workspace.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let file = std::fs::File::create(&path).unwrap();
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 + i);
            file.set_modified(at).unwrap();
        }
    }

    async fn glob(ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        Glob.call(input, ctx).await
    }

    #[tokio::test]
    async fn matches_by_path_relative_to_the_directory() {
        let (_d, ctx) = workspace();
        write(
            &ctx,
            &["Cargo.toml", "src/lib.rs", "src/tools/glob.rs", "README.md"],
        );
        let all = glob(&ctx, json!({"pattern": "**/*.rs"})).await.unwrap();
        assert_eq!(all, "src/tools/glob.rs\nsrc/lib.rs");
        let top = glob(&ctx, json!({"pattern": "*.toml"})).await.unwrap();
        assert_eq!(top, "Cargo.toml");
        let under = glob(&ctx, json!({"pattern": "*.rs", "path": "src"}))
            .await
            .unwrap();
        assert_eq!(under, "src/lib.rs");
        let braces = glob(&ctx, json!({"pattern": "*.{md,toml}"})).await.unwrap();
        assert_eq!(braces, "README.md\nCargo.toml");
        let none = glob(&ctx, json!({"pattern": "**/*.py"})).await.unwrap();
        assert_eq!(none, "No files found");
    }

    #[tokio::test]
    async fn honours_gitignore_without_a_git_directory_and_skips_dot_git() {
        let (_d, ctx) = workspace();
        write(
            &ctx,
            &[
                "target/debug/out.rs",
                "src/main.rs",
                ".git/hooks/pre-commit.rs",
                ".github/build.rs",
                "notes/skip.rs",
            ],
        );
        std::fs::write(ctx.workspace.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(ctx.workspace.join(".ignore"), "notes/\n").unwrap();
        let out = glob(&ctx, json!({"pattern": "**/*.rs"})).await.unwrap();
        assert_eq!(out, ".github/build.rs\nsrc/main.rs");
    }

    #[tokio::test]
    async fn a_gitignore_to_dev_zero_and_a_fifo_ignore_are_skipped_with_a_warning() {
        let (_d, ctx) = workspace();
        write(
            &ctx,
            &["src/main.rs", "sub/kept.rs", "sub/gone.rs", "target/out.rs"],
        );
        std::os::unix::fs::symlink("/dev/zero", ctx.workspace.join(".gitignore")).unwrap();
        crate::small_file::fifo(&ctx.workspace.join(".ignore"));
        crate::small_file::fifo(&ctx.workspace.join("sub/.gitignore"));
        std::fs::create_dir_all(ctx.workspace.join(".git/info")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", ctx.workspace.join(".git/info/exclude")).unwrap();
        // A readable ignore file beside them still counts.
        std::fs::write(ctx.workspace.join("sub/.ignore"), "gone.rs\n").unwrap();
        // Returns at all: before, the walk read /dev/zero until memory ran out, or
        // waited on the FIFO forever.
        let out = glob(&ctx, json!({"pattern": "**/*.rs"})).await.unwrap();
        assert_eq!(
            out,
            "target/out.rs\nsub/kept.rs\nsrc/main.rs\n\
             [warning: .git/info/exclude: a symbolic link, which is not followed; its ignore rules were not applied]\n\
             [warning: .gitignore: a symbolic link, which is not followed; its ignore rules were not applied]\n\
             [warning: .ignore: not a regular file; its ignore rules were not applied]\n\
             [warning: sub/.gitignore: not a regular file; its ignore rules were not applied]"
        );
        let none = glob(&ctx, json!({"pattern": "*.py"})).await.unwrap();
        assert!(none.starts_with("No files found\n[warning: "), "{none}");
    }

    #[tokio::test]
    async fn an_oversize_ignore_file_is_skipped_with_a_warning() {
        let (_d, ctx) = workspace();
        write(&ctx, &["a.rs"]);
        let huge = "*.rs\n".repeat(small_file_limit() / 5 + 1);
        std::fs::write(ctx.workspace.join(".gitignore"), &huge).unwrap();
        let out = glob(&ctx, json!({"pattern": "*.rs"})).await.unwrap();
        assert_eq!(
            out,
            format!(
                "a.rs\n[warning: .gitignore: too large ({} bytes; the limit is {}); its ignore \
                 rules were not applied]",
                huge.len(),
                small_file_limit()
            )
        );
    }

    fn small_file_limit() -> usize {
        crate::small_file::MAX_BYTES as usize
    }

    #[tokio::test]
    async fn ignore_rules_rank_as_ripgrep_ranks_them() {
        let (_d, ctx) = workspace();
        write(
            &ctx,
            &[
                "a.log",
                "keep.log",
                "deep/b.log",
                "deep/c.log",
                "deep/d.tmp",
                "wt/e.rs",
                "x.tmp",
            ],
        );
        std::fs::write(
            ctx.workspace.join(".gitignore"),
            "*.log\n!keep.log\n*.tmp\n",
        )
        .unwrap();
        // Deeper rules win; `.ignore` outranks `.gitignore` in its directory.
        std::fs::write(ctx.workspace.join("deep/.gitignore"), "!b.log\n").unwrap();
        std::fs::write(ctx.workspace.join("deep/.ignore"), "!d.tmp\n").unwrap();
        std::fs::create_dir_all(ctx.workspace.join(".git/info")).unwrap();
        std::fs::write(ctx.workspace.join(".git/info/exclude"), "wt/\n").unwrap();
        let out = glob(&ctx, json!({"pattern": "**/*"})).await.unwrap();
        let mut found: Vec<&str> = out.lines().collect();
        found.sort_unstable();
        assert_eq!(
            found,
            [
                ".gitignore",
                "deep/.gitignore",
                "deep/.ignore",
                "deep/b.log",
                "deep/d.tmp",
                "keep.log"
            ]
        );
    }

    #[tokio::test]
    async fn newest_first_ties_by_path() {
        let (_d, ctx) = workspace();
        write(&ctx, &["old.txt", "mid.txt", "new.txt"]);
        let same = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400);
        for name in ["b-tie.txt", "a-tie.txt"] {
            let file = std::fs::File::create(ctx.workspace.join(name)).unwrap();
            file.set_modified(same).unwrap();
        }
        let out = glob(&ctx, json!({"pattern": "*.txt"})).await.unwrap();
        assert_eq!(out, "new.txt\nmid.txt\na-tie.txt\nb-tie.txt\nold.txt");
    }

    #[tokio::test]
    async fn caps_at_one_hundred_and_says_how_many_more() {
        let (_d, ctx) = workspace();
        let names: Vec<String> = (0..130).map(|i| format!("f{i:03}.txt")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        write(&ctx, &names);
        let out = glob(&ctx, json!({"pattern": "*.txt"})).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 101);
        assert_eq!(lines[0], "f129.txt");
        assert_eq!(lines[99], "f030.txt");
        assert_eq!(
            lines[100],
            "[30 more files not shown; narrow the search with a more specific pattern or path]"
        );
    }

    #[tokio::test]
    async fn refuses_paths_outside_the_workspace_and_bad_input() {
        let (_d, ctx) = workspace();
        let err = glob(&ctx, json!({"pattern": "*", "path": "../outside"}))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        let err = glob(&ctx, json!({"pattern": "*", "path": "missing"}))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "missing: no such directory");
        let err = glob(&ctx, json!({"pattern": "a[", "path": "."}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err}");
        let err = glob(&ctx, json!({"pattern": "/etc/*"})).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err}");
    }

    #[tokio::test]
    async fn a_cancelled_call_stops() {
        let (_d, ctx) = workspace();
        write(&ctx, &["a.txt"]);
        ctx.cancel.cancel();
        let err = glob(&ctx, json!({"pattern": "*"})).await.unwrap_err();
        assert!(matches!(err, ToolError::Cancelled), "{err}");
    }
}
