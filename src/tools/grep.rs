//! The `Grep` tool: searches file contents with ripgrep's crates (grep-regex for the
//! pattern, grep-searcher for the lines and their context) over the files the shared
//! walk (`walk`) sees, and prints the result the way ripgrep would. It does not
//! find files by name (that is `Glob`) or read whole files (`Read`).
//!
//! This file holds the tool as the model sees it and the tests that drive whole calls;
//! the input and the search it becomes are in `search`, the output modes in `output`.

mod output;
mod search;

use futures::future::BoxFuture;
use serde_json::Value;

use self::search::{GrepInput, Search};
use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

const DESCRIPTION: &str = "\
Searches file contents for a regular expression (ripgrep's engine and syntax) under \
`path`: a file or a directory, the workspace root by default. Files ignored by .gitignore \
or .ignore, the .git directory and binary files are skipped; hidden files are searched.

Output modes (`output_mode`):
- `files_with_matches` (default): the paths of matching files, most recently modified \
first.
- `content`: the matching lines as `path:line:text` (`-n`, on by default; `path:text` \
with `\"-n\": false`). `-A`, `-B` and `-C` add context lines, printed as `path-line-text`, \
with `--` between groups that are not adjacent.
- `count`: `path:N`, the number of matching lines in each file.

Narrow a search with `glob` (e.g. `*.rs`, `*.{ts,tsx}`, `src/**/*.py`: a glob without `/` \
matches file names at any depth, one with `/` matches paths from the workspace root), \
with `type` (a ripgrep file type: `rust`, `py`, `js`, `ts`, `go`, `java`, `c`, `cpp`, \
`md`, …) or with a deeper `path`. `-i` ignores case. Patterns match within one line; set \
`multiline: true` to let a pattern span lines (`.` then matches newlines too). Escape \
regex metacharacters to find them literally: `interface\\{\\}` finds `interface{}`.

At most `head_limit` entries (lines, paths or counts; 500 by default, 0 for as many as fit) \
are shown, and at most 256 KiB in all; then a note says how many more there were. Lines \
longer than 500 characters are cut. Files with a line longer than 16 MiB (in a multiline \
search: files larger than 16 MiB) are not searched, and the output names them.";

/// Searches file contents.
#[derive(Debug)]
pub struct Grep;

impl Tool for Grep {
    fn name(&self) -> &str {
        "Grep"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        super::schema::<GrepInput>()
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
            let input: GrepInput = super::parse(input)?;
            let search = Search::new(&input, ctx)?;
            super::blocking(move || search.run()).await
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
        std::fs::write(dir.path().join("outside/secret.txt"), "hello\n").unwrap();
        let ctx = ToolContext::new(workspace, SessionId::new());
        (dir, ctx)
    }

    /// Writes `files` (name, contents) under the workspace; each is modified a second
    /// after the one before, so later files are newer.
    fn write(ctx: &ToolContext, files: &[(&str, &[u8])]) {
        for (i, (name, contents)) in (0u64..).zip(files) {
            let path = ctx.workspace.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, contents).unwrap();
            let at = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 + i);
            let file = std::fs::File::options().write(true).open(&path).unwrap();
            file.set_modified(at).unwrap();
        }
    }

    /// The files most tests search.
    fn fixture() -> (tempfile::TempDir, ToolContext) {
        let (dir, ctx) = workspace();
        write(
            &ctx,
            &[
                (
                    "greek.txt",
                    b"alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\ntheta\n",
                ),
                ("src/lib.rs", b"pub fn hello() {}\nfn Hello() {}\n"),
                ("src/main.py", b"print('hello')\n"),
                ("data.bin", b"hello\0\x01\x02binary\n"),
                (".gitignore", b"target/\n"),
                ("target/gen.rs", b"fn hello() {}\n"),
            ],
        );
        (dir, ctx)
    }

    async fn grep(ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        Grep.call(input, ctx).await
    }

    #[tokio::test]
    async fn files_with_matches_is_the_default_newest_first() {
        let (_d, ctx) = fixture();
        let out = grep(&ctx, json!({"pattern": "hello"})).await.unwrap();
        // The binary file and the ignored target/ are skipped.
        assert_eq!(out, "src/main.py\nsrc/lib.rs");
        let none = grep(&ctx, json!({"pattern": "omega"})).await.unwrap();
        assert_eq!(none, "No files found");
    }

    #[tokio::test]
    async fn case_insensitive_finds_more() {
        let (_d, ctx) = fixture();
        let sensitive = json!({"pattern": "HELLO", "output_mode": "content"});
        assert_eq!(grep(&ctx, sensitive).await.unwrap(), "No matches found");
        let insensitive = json!({"pattern": "HELLO", "-i": true, "output_mode": "content"});
        assert_eq!(
            grep(&ctx, insensitive).await.unwrap(),
            "src/lib.rs:1:pub fn hello() {}\nsrc/lib.rs:2:fn Hello() {}\nsrc/main.py:1:print('hello')"
        );
    }

    #[tokio::test]
    async fn content_with_and_without_line_numbers() {
        let (_d, ctx) = fixture();
        let numbered = json!({"pattern": "hello", "output_mode": "content"});
        assert_eq!(
            grep(&ctx, numbered).await.unwrap(),
            "src/lib.rs:1:pub fn hello() {}\nsrc/main.py:1:print('hello')"
        );
        let bare = json!({"pattern": "hello", "output_mode": "content", "-n": false});
        assert_eq!(
            grep(&ctx, bare).await.unwrap(),
            "src/lib.rs:pub fn hello() {}\nsrc/main.py:print('hello')"
        );
    }

    #[tokio::test]
    async fn context_lines_and_group_separators_as_ripgrep_prints_them() {
        let (_d, ctx) = fixture();
        write(&ctx, &[("more.txt", b"one\ngamma\ntwo\n")]);
        let both = json!({"pattern": "^(gamma|theta)$", "output_mode": "content", "-C": 1});
        assert_eq!(
            grep(&ctx, both).await.unwrap(),
            "greek.txt-2-beta\ngreek.txt:3:gamma\ngreek.txt-4-delta\n--\n\
             greek.txt-7-eta\ngreek.txt:8:theta\n--\n\
             more.txt-1-one\nmore.txt:2:gamma\nmore.txt-3-two"
        );
        let after = json!({
            "pattern": "gamma", "path": "greek.txt", "output_mode": "content", "-A": 2, "-n": false,
        });
        assert_eq!(
            grep(&ctx, after).await.unwrap(),
            "greek.txt:gamma\ngreek.txt-delta\ngreek.txt-epsilon"
        );
        // -B overrides -C on its side.
        let before = json!({
            "pattern": "delta", "path": "greek.txt", "output_mode": "content", "-C": 1, "-B": 0,
        });
        assert_eq!(
            grep(&ctx, before).await.unwrap(),
            "greek.txt:4:delta\ngreek.txt-5-epsilon"
        );
    }

    #[tokio::test]
    async fn count_mode_counts_matching_lines() {
        let (_d, ctx) = fixture();
        let out = grep(&ctx, json!({"pattern": "fn|eta", "output_mode": "count"}))
            .await
            .unwrap();
        assert_eq!(out, "greek.txt:4\nsrc/lib.rs:2");
    }

    #[tokio::test]
    async fn glob_and_type_filters() {
        let (_d, ctx) = fixture();
        let py = grep(&ctx, json!({"pattern": "hello", "glob": "*.py"}))
            .await
            .unwrap();
        assert_eq!(py, "src/main.py");
        let rooted = json!({"pattern": "hello", "glob": "src/*.rs", "path": "src"});
        assert_eq!(grep(&ctx, rooted).await.unwrap(), "src/lib.rs");
        let rust = grep(&ctx, json!({"pattern": "hello", "type": "rust"}))
            .await
            .unwrap();
        assert_eq!(rust, "src/lib.rs");
        let err = grep(&ctx, json!({"pattern": "hello", "type": "klingon"}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err}");
        assert!(err.to_string().contains("klingon"), "{err}");
    }

    #[tokio::test]
    async fn head_limit_caps_every_mode_and_says_how_many_more() {
        let (_d, ctx) = fixture();
        let content = json!({"pattern": "a$", "output_mode": "content", "head_limit": 2});
        assert_eq!(
            grep(&ctx, content).await.unwrap(),
            "greek.txt:1:alpha\ngreek.txt:2:beta\n[5 more lines not shown; narrow the search \
             with path, glob or type, or raise head_limit]"
        );
        let files = json!({"pattern": "hello", "head_limit": 1});
        assert_eq!(
            grep(&ctx, files).await.unwrap(),
            "src/main.py\n[1 more files not shown; narrow the search with path, glob or type, \
             or raise head_limit]"
        );
        let count = json!({"pattern": "fn|eta", "output_mode": "count", "head_limit": 1});
        assert_eq!(
            grep(&ctx, count).await.unwrap(),
            "greek.txt:4\n[1 more counts not shown; narrow the search with path, glob or type, \
             or raise head_limit]"
        );
    }

    #[tokio::test]
    async fn multiline_patterns_span_lines() {
        let (_d, ctx) = fixture();
        let input = json!({"pattern": r"hello\(\) \{\}\nfn", "output_mode": "content"});
        let err = grep(&ctx, input).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err}");
        let input = json!({"pattern": r"pub.*\nfn", "output_mode": "content", "multiline": true});
        assert_eq!(
            grep(&ctx, input).await.unwrap(),
            "src/lib.rs:1:pub fn hello() {}\nsrc/lib.rs:2:fn Hello() {}"
        );
    }

    #[tokio::test]
    async fn binary_files_are_skipped_in_every_mode() {
        let (_d, ctx) = fixture();
        for mode in ["content", "files_with_matches", "count"] {
            let input = json!({"pattern": "binary", "output_mode": mode});
            let out = grep(&ctx, input).await.unwrap();
            assert!(out.starts_with("No "), "{mode}: {out}");
        }
    }

    #[tokio::test]
    async fn long_lines_are_cut() {
        let (_d, ctx) = workspace();
        let line = format!("{}\n", "x".repeat(600));
        write(&ctx, &[("min.js", line.as_bytes())]);
        let out = grep(&ctx, json!({"pattern": "x", "output_mode": "content"}))
            .await
            .unwrap();
        let expected = format!(
            "min.js:1:{} [… line cut at 500 characters]",
            "x".repeat(500)
        );
        assert_eq!(out, expected);
    }

    #[tokio::test]
    async fn a_gitignore_to_dev_zero_and_a_fifo_ignore_are_skipped_with_a_warning() {
        let (_d, ctx) = fixture();
        std::fs::remove_file(ctx.workspace.join(".gitignore")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", ctx.workspace.join(".gitignore")).unwrap();
        crate::small_file::fifo(&ctx.workspace.join(".ignore"));
        let input = json!({"pattern": "hello", "output_mode": "content"});
        let out = grep(&ctx, input).await.unwrap();
        // target/ is no longer ignored: its .gitignore was not read.
        assert_eq!(
            out,
            "src/lib.rs:1:pub fn hello() {}\nsrc/main.py:1:print('hello')\n\
             target/gen.rs:1:fn hello() {}\n\
             [warning: .gitignore: a symbolic link, which is not followed; its ignore rules were not applied]\n\
             [warning: .ignore: not a regular file; its ignore rules were not applied]"
        );
    }

    #[tokio::test]
    async fn a_glob_outranks_the_ignore_files_as_with_rg_glob() {
        let (_d, ctx) = fixture();
        write(&ctx, &[("notes.log", b"hello\n"), (".ignore", b"*.log\n")]);
        let plain = grep(&ctx, json!({"pattern": "hello", "glob": "*.py"})).await;
        assert_eq!(plain.unwrap(), "src/main.py");
        let out = grep(&ctx, json!({"pattern": "hello", "glob": "*.log"}))
            .await
            .unwrap();
        assert_eq!(out, "notes.log");
        // An ignored directory stays unsearched: a glob selects files, not their
        // directories (as with rg --glob).
        let out = grep(&ctx, json!({"pattern": "hello", "glob": "target/*.rs"}))
            .await
            .unwrap();
        assert_eq!(out, "No files found");
    }

    #[tokio::test]
    async fn head_limit_zero_over_a_huge_match_set_stops_at_the_output_cap() {
        let (_d, ctx) = workspace();
        let lines: String = (0..200_000).map(|i| format!("match {i}\n")).collect();
        write(&ctx, &[("many.txt", lines.as_bytes())]);
        for mode in ["content", "count", "files_with_matches"] {
            let input = json!({"pattern": "match", "output_mode": mode, "head_limit": 0});
            let out = grep(&ctx, input).await.unwrap();
            assert!(out.len() <= output::MAX_OUTPUT_BYTES + 200, "{}", out.len());
            if mode == "content" {
                let shown = out.lines().count() - 1;
                assert_eq!(out.lines().next(), Some("many.txt:1:match 0"));
                assert_eq!(
                    out.lines().last().unwrap(),
                    format!(
                        "[{} more lines not shown: the output stops at 256 KiB; narrow the \
                         search with path, glob or type]",
                        200_000 - shown
                    )
                );
            }
        }
    }

    #[tokio::test]
    async fn a_multiline_search_does_not_read_a_file_past_the_heap_limit() {
        let (_d, ctx) = workspace();
        let big = vec![b'a'; search::HEAP_LIMIT + 1];
        write(&ctx, &[("big.txt", &big), ("small.txt", b"a\nb\n")]);
        let input = json!({"pattern": "a\nb", "multiline": true, "output_mode": "content"});
        let out = grep(&ctx, input).await.unwrap();
        assert_eq!(
            out,
            format!(
                "small.txt:1:a\nsmall.txt:2:b\n[warning: not searched: big.txt ({} bytes): a \
                 multiline search reads whole files, of at most 16 MiB; search it without \
                 multiline]",
                big.len()
            )
        );
    }

    #[tokio::test]
    async fn a_line_past_the_heap_limit_is_not_held() {
        let (_d, ctx) = workspace();
        let mut long = vec![b'a'; search::HEAP_LIMIT + 1];
        long.extend_from_slice(b"\nneedle\n");
        write(&ctx, &[("long.txt", &long), ("short.txt", b"needle\n")]);
        let out = grep(&ctx, json!({"pattern": "needle"})).await.unwrap();
        assert_eq!(
            out,
            "short.txt\n[warning: not searched: long.txt: it has a line longer than 16 MiB]"
        );
    }

    #[tokio::test]
    async fn bad_regex_and_bad_paths_are_errors() {
        let (_d, ctx) = fixture();
        let err = grep(&ctx, json!({"pattern": "fn("})).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidInput(_)), "{err}");
        assert!(err.to_string().contains("unclosed group"), "{err}");
        let err = grep(&ctx, json!({"pattern": "hello", "path": "../outside"}))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        let err = grep(&ctx, json!({"pattern": "hello", "path": "nope"}))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "nope: no such file or directory");
    }

    #[tokio::test]
    async fn a_cancelled_call_stops() {
        let (_d, ctx) = fixture();
        ctx.cancel.cancel();
        let err = grep(&ctx, json!({"pattern": "hello"})).await.unwrap_err();
        assert!(matches!(err, ToolError::Cancelled), "{err}");
    }

    #[tokio::test]
    async fn the_schema_uses_claude_code_names_inline() {
        let schema = Grep.input_schema();
        let properties = schema["properties"].as_object().unwrap();
        let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "-A",
                "-B",
                "-C",
                "-i",
                "-n",
                "glob",
                "head_limit",
                "multiline",
                "output_mode",
                "path",
                "pattern",
                "type"
            ]
        );
        assert_eq!(schema["required"], json!(["pattern"]));
        assert!(!schema.to_string().contains("$ref"), "{schema}");
    }
}
