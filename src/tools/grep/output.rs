//! What a search prints, in each output mode: the lines of a file as ripgrep prints
//! them (`path:line:text`, context lines with `-`, `--` between groups, long lines
//! cut), counts, or paths; and the head limit over all of it, with the note saying how
//! many more there were. It does not choose the files nor run the matcher (`search`).

use grep_searcher::{Searcher, Sink, SinkContext, SinkFinish, SinkMatch};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// Characters of one line shown at most (minified files have lines of megabytes).
const MAX_LINE_CHARS: usize = 500;

/// What a search prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub(super) enum OutputMode {
    Content,
    #[default]
    FilesWithMatches,
    Count,
}

/// The output's entries with the head limit applied: the first `limit` are kept, the
/// rest only counted.
#[derive(Debug)]
pub(super) struct Entries {
    pub(super) shown: Vec<String>,
    pub(super) limit: usize,
    pub(super) omitted: usize,
}

impl Entries {
    pub(super) fn push(&mut self, entry: String) {
        if self.shown.len() < self.limit {
            self.shown.push(entry);
        } else {
            self.omitted += 1;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.shown.is_empty() && self.omitted == 0
    }

    pub(super) fn render(self, mode: OutputMode) -> String {
        if self.is_empty() {
            return match mode {
                OutputMode::FilesWithMatches => "No files found".into(),
                OutputMode::Content | OutputMode::Count => "No matches found".into(),
            };
        }
        let mut out = self.shown.join("\n");
        if self.omitted > 0 {
            let what = match mode {
                OutputMode::Content => "lines",
                OutputMode::FilesWithMatches => "files",
                OutputMode::Count => "counts",
            };
            out.push_str(&format!(
                "\n[{} more {what} not shown; narrow the search with path, glob or type, or \
                 raise head_limit]",
                self.omitted
            ));
        }
        out
    }
}

/// Collects what one file contributes to the output: its lines (at most `room` of
/// them, the rest counted in `overflow`) or its number of matching lines.
#[derive(Debug)]
pub(super) struct FileSink<'a> {
    pub(super) mode: OutputMode,
    pub(super) path: &'a str,
    pub(super) line_numbers: bool,
    pub(super) room: usize,
    pub(super) cancel: &'a CancellationToken,
    pub(super) lines: Vec<String>,
    pub(super) overflow: usize,
    pub(super) matched_lines: u64,
    /// The file turned out to hold a NUL byte; what it matched is dropped.
    pub(super) binary: bool,
}

impl FileSink<'_> {
    fn push(&mut self, entry: impl FnOnce() -> String) {
        if self.lines.len() < self.room {
            self.lines.push(entry());
        } else {
            self.overflow += 1;
        }
    }

    /// One line as ripgrep prints it: `:` after the path of a matching line, `-` after
    /// the path of a context line.
    fn line(&mut self, separator: char, number: u64, bytes: &[u8]) {
        let path = self.path;
        let line_numbers = self.line_numbers;
        self.push(|| {
            let text = String::from_utf8_lossy(bytes);
            let text = text.trim_end_matches(['\n', '\r']);
            let text = match text.char_indices().nth(MAX_LINE_CHARS) {
                Some((end, _)) => {
                    format!(
                        "{} [… line cut at {MAX_LINE_CHARS} characters]",
                        &text[..end]
                    )
                }
                None => text.to_owned(),
            };
            if line_numbers {
                format!("{path}{separator}{number}{separator}{text}")
            } else {
                format!("{path}{separator}{text}")
            }
        });
    }
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let first = mat.line_number().unwrap_or(0);
        for (number, line) in (first..).zip(mat.lines()) {
            self.matched_lines += 1;
            if self.mode == OutputMode::Content {
                self.line(':', number, line);
            }
        }
        Ok(self.mode != OutputMode::FilesWithMatches && !self.cancel.is_cancelled())
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, Self::Error> {
        self.line('-', context.line_number().unwrap_or(0), context.bytes());
        Ok(!self.cancel.is_cancelled())
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, Self::Error> {
        self.push(|| "--".into());
        Ok(true)
    }

    fn finish(&mut self, _: &Searcher, finish: &SinkFinish) -> Result<(), Self::Error> {
        self.binary = finish.binary_byte_offset().is_some();
        Ok(())
    }
}
