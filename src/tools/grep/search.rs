//! A `Grep` call's input and the search it becomes: the pattern compiled (case,
//! multiline), the walk narrowed by path, glob and type, the context asked for, the
//! head limit; then the walk and the search of each file in path order. How each
//! mode prints is in `output`.
//!
//! Memory is bounded whatever the files hold: a line longer than [`HEAP_LIMIT`] (or,
//! in a multiline search, which reads each file whole, a file larger than it) is not
//! searched, and the output says which files were not.

use std::path::PathBuf;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder};
use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::output::{Entries, FileSink, OutputMode};
use crate::error::ToolError;
use crate::tools::ToolContext;
use crate::tools::walk::{self, Walk, newest_first};

/// Entries shown when the model gives no `head_limit`: enough for any focused search,
/// few enough that a careless one does not flood the context.
const DEFAULT_HEAD_LIMIT: usize = 500;

/// The most heap one search uses for a file: the longest line it holds (the whole
/// file, in a multiline search). Safe calls run ten at a time.
pub(super) const HEAP_LIMIT: usize = 16 * 1024 * 1024;

/// Files not searched, named one by one at most; the rest are counted.
const MAX_WARNINGS: usize = 10;

/// Input of `Grep`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GrepInput {
    /// The regular expression to search file contents for (ripgrep syntax).
    pattern: String,
    /// The file or directory to search in. Defaults to the workspace root.
    path: Option<String>,
    /// Only search files matching this glob (rg --glob), e.g. `*.rs`, `*.{ts,tsx}`,
    /// `src/**/*.py`.
    glob: Option<String>,
    /// Only search files of this type (rg --type), e.g. `rust`, `py`, `js`, `ts`, `go`.
    #[serde(rename = "type")]
    file_type: Option<String>,
    /// `files_with_matches` (default): paths of matching files, newest first; `content`:
    /// the matching lines; `count`: the number of matching lines per file.
    output_mode: Option<OutputMode>,
    /// Case-insensitive search (rg -i).
    #[serde(rename = "-i")]
    case_insensitive: Option<bool>,
    /// Show line numbers (rg -n). `content` mode only; defaults to true.
    #[serde(rename = "-n")]
    line_numbers: Option<bool>,
    /// Lines to show after each match (rg -A). `content` mode only.
    #[serde(rename = "-A")]
    after: Option<usize>,
    /// Lines to show before each match (rg -B). `content` mode only.
    #[serde(rename = "-B")]
    before: Option<usize>,
    /// Lines to show before and after each match (rg -C). `content` mode only.
    #[serde(rename = "-C")]
    context: Option<usize>,
    /// Show only the first N entries (lines, paths or counts), like `| head -N`.
    /// Defaults to 500; 0 means as many as fit in the output (256 KiB).
    head_limit: Option<usize>,
    /// Let the pattern span lines, with `.` matching newlines (rg -U --multiline-dotall).
    multiline: Option<bool>,
}

/// A search whose input has been checked, ready to run off the async runtime.
#[derive(Debug)]
pub(super) struct Search {
    ctx: ToolContext,
    beneath: crate::tools::beneath::Beneath,
    walk: Walk,
    matcher: RegexMatcher,
    multiline: bool,
    searcher: Searcher,
    mode: OutputMode,
    line_numbers: bool,
    /// Whether context lines were asked for (ripgrep then puts `--` between files too).
    context: bool,
    limit: usize,
}

impl Search {
    pub(super) fn new(input: &GrepInput, ctx: &ToolContext) -> Result<Self, ToolError> {
        let multiline = input.multiline.unwrap_or(false);
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(input.case_insensitive.unwrap_or(false))
            .multi_line(true)
            .dot_matches_new_line(multiline)
            // Without multiline the matcher must never match across a line end.
            .line_terminator((!multiline).then_some(b'\n'))
            .build(&input.pattern)
            .map_err(|e| {
                ToolError::InvalidInput(format!("the pattern is not a valid regex: {e}"))
            })?;
        let root = match input.path.as_deref().filter(|p| !p.is_empty()) {
            Some(path) => ctx.resolve(path)?,
            None => ctx.workspace.clone(),
        };
        if !root.exists() {
            let shown = ctx.display(&root);
            return Err(ToolError::Failed(format!(
                "{shown}: no such file or directory"
            )));
        }
        let mut walk = Walk::new(&root, ctx.private.clone(), ctx.read_deny.clone());
        if let Some(glob) = input.glob.as_deref().filter(|g| !g.is_empty()) {
            // Rooted at the workspace, as ripgrep roots `--glob` at its working directory.
            let mut overrides = OverrideBuilder::new(&ctx.workspace);
            overrides
                .add(glob)
                .map_err(|e| ToolError::InvalidInput(format!("bad glob {glob:?}: {e}")))?;
            let overrides = overrides
                .build()
                .map_err(|e| ToolError::InvalidInput(format!("bad glob {glob:?}: {e}")))?;
            walk.overrides(overrides);
        }
        if let Some(name) = input.file_type.as_deref().filter(|t| !t.is_empty()) {
            let types = TypesBuilder::new()
                .add_defaults()
                .select(name)
                .build()
                .map_err(|e| {
                    ToolError::InvalidInput(format!("{e}; use `glob` to select other files"))
                })?;
            walk.types(types);
        }
        let mode = input.output_mode.unwrap_or_default();
        let (before, after) = if mode == OutputMode::Content {
            (
                input.before.or(input.context).unwrap_or(0),
                input.after.or(input.context).unwrap_or(0),
            )
        } else {
            (0, 0)
        };
        let searcher = SearcherBuilder::new()
            .line_number(true)
            .multi_line(multiline)
            .before_context(before)
            .after_context(after)
            .binary_detection(BinaryDetection::quit(b'\0'))
            .heap_limit(Some(HEAP_LIMIT))
            .build();
        Ok(Self {
            ctx: ctx.clone(),
            beneath: ctx.beneath(),
            walk,
            matcher,
            multiline,
            searcher,
            mode,
            line_numbers: input.line_numbers.unwrap_or(true),
            context: before > 0 || after > 0,
            limit: match input.head_limit {
                // No count limit; the output's own limit in bytes still holds.
                Some(0) => usize::MAX,
                Some(limit) => limit,
                None => DEFAULT_HEAD_LIMIT,
            },
        })
    }

    /// Walks, searches each file in path order, and renders the output.
    pub(super) fn run(mut self) -> Result<String, ToolError> {
        let walked = self.walk.files(&self.ctx.cancel, |_| true)?;
        let mut files = walked.files;
        files.sort();
        let mut entries = Entries::new(self.limit);
        let mut matched: Vec<PathBuf> = Vec::new();
        let mut unsearched: Vec<String> = Vec::new();
        for file in files {
            if self.ctx.cancel.is_cancelled() {
                return Err(ToolError::Cancelled);
            }
            let path = self.ctx.display(&file);
            // A multiline search reads the whole file: one too large is not read.
            if self.multiline
                && let Ok(meta) = std::fs::metadata(&file)
                && meta.len() > HEAP_LIMIT as u64
            {
                unsearched.push(format!(
                    "{path} ({} bytes): a multiline search reads whole files, of at most {} \
                     MiB; search it without multiline",
                    meta.len(),
                    HEAP_LIMIT >> 20
                ));
                continue;
            }
            let mut sink = FileSink::new(
                self.mode,
                &path,
                self.line_numbers,
                &self.ctx.cancel,
                entries.room(),
            );
            // Read through a descriptor opened beneath the workspace (a file
            // swapped for a link out meanwhile is not read).
            let searched = match self.beneath.read(&file) {
                Ok(opened) => self.searcher.search_file(&self.matcher, &opened, &mut sink),
                Err(e) => Err(e),
            };
            match searched {
                Ok(()) => {}
                // The searcher's own words for its heap limit.
                Err(e) if e.to_string().contains("allocation limit") => {
                    unsearched.push(format!(
                        "{path}: it has a line longer than {} MiB",
                        HEAP_LIMIT >> 20
                    ));
                    continue;
                }
                // A file that cannot be read is skipped, as ripgrep skips it.
                Err(_) => continue,
            }
            if sink.binary || sink.matched_lines == 0 {
                continue;
            }
            match self.mode {
                OutputMode::FilesWithMatches => matched.push(file),
                OutputMode::Count => entries.push(format!("{path}:{}", sink.matched_lines)),
                OutputMode::Content => {
                    if self.context && !entries.is_empty() {
                        entries.push("--".into());
                    }
                    entries.take(sink);
                }
            }
        }
        // A sink stops its file early on cancel; what was found is then incomplete.
        if self.ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        for file in newest_first(matched) {
            entries.push(self.ctx.display(&file));
        }
        let mut out = vec![entries.render(self.mode)];
        for file in unsearched.iter().take(MAX_WARNINGS) {
            out.push(format!("[warning: not searched: {file}]"));
        }
        if unsearched.len() > MAX_WARNINGS {
            let more = unsearched.len() - MAX_WARNINGS;
            out.push(format!("[warning: {more} more files were not searched]"));
        }
        out.extend(walk::warnings(&walked.skipped, &self.ctx));
        Ok(out.join("\n"))
    }
}
