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

/// Bytes of output at most, whatever `head_limit` says: the entries are cut as they
/// are made, so a search that matches everything costs time, not memory.
pub(super) const MAX_OUTPUT_BYTES: usize = 256 * 1024;

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

/// The output's entries with the head limit and [`MAX_OUTPUT_BYTES`] applied: the
/// first are kept, the rest only counted.
#[derive(Debug)]
pub(super) struct Entries {
    pub(super) shown: Vec<String>,
    pub(super) limit: usize,
    /// Bytes of the entries kept, each with its line end.
    pub(super) bytes: usize,
    pub(super) omitted: usize,
    /// The output reached [`MAX_OUTPUT_BYTES`] (rather than the head limit).
    pub(super) full: bool,
}

impl Entries {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            shown: Vec::new(),
            limit,
            bytes: 0,
            omitted: 0,
            full: false,
        }
    }

    pub(super) fn push(&mut self, entry: String) {
        if self.full || self.shown.len() >= self.limit {
            self.omitted += 1;
        } else if self.bytes + entry.len() + 1 > MAX_OUTPUT_BYTES {
            self.full = true;
            self.omitted += 1;
        } else {
            self.bytes += entry.len() + 1;
            self.shown.push(entry);
        }
    }

    /// Takes what one file contributed: its lines, then what did not fit.
    pub(super) fn take(&mut self, sink: FileSink<'_>) {
        let (overflow, full) = (sink.overflow, sink.full);
        for line in sink.lines {
            self.push(line);
        }
        self.omitted += overflow;
        self.full |= full;
    }

    /// Room left for one file's lines: entries, and bytes.
    pub(super) fn room(&self) -> (usize, usize) {
        if self.full {
            return (0, 0);
        }
        (
            self.limit.saturating_sub(self.shown.len()),
            MAX_OUTPUT_BYTES.saturating_sub(self.bytes),
        )
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
            let omitted = self.omitted;
            out.push_str(&if self.full {
                format!(
                    "\n[{omitted} more {what} not shown: the output stops at {} KiB; narrow \
                     the search with path, glob or type]",
                    MAX_OUTPUT_BYTES / 1024
                )
            } else {
                format!(
                    "\n[{omitted} more {what} not shown; narrow the search with path, glob or \
                     type, or raise head_limit]"
                )
            });
        }
        out
    }
}

/// Collects what one file contributes to the output: its lines (as many as the room
/// left in the output holds, the rest counted in `overflow`) or its number of
/// matching lines.
#[derive(Debug)]
pub(super) struct FileSink<'a> {
    mode: OutputMode,
    path: &'a str,
    line_numbers: bool,
    cancel: &'a CancellationToken,
    /// Lines, and bytes, the output has room for.
    room: (usize, usize),
    lines: Vec<String>,
    bytes: usize,
    overflow: usize,
    /// The lines reached the room in bytes.
    full: bool,
    pub(super) matched_lines: u64,
    /// The file turned out to hold a NUL byte; what it matched is dropped.
    pub(super) binary: bool,
}

impl<'a> FileSink<'a> {
    /// A sink for the file shown as `path`, with `room` (lines, bytes) left.
    pub(super) fn new(
        mode: OutputMode,
        path: &'a str,
        line_numbers: bool,
        cancel: &'a CancellationToken,
        room: (usize, usize),
    ) -> Self {
        Self {
            mode,
            path,
            line_numbers,
            cancel,
            room,
            lines: Vec::new(),
            bytes: 0,
            overflow: 0,
            full: false,
            matched_lines: 0,
            binary: false,
        }
    }

    fn push(&mut self, entry: impl FnOnce() -> String) {
        if self.full || self.lines.len() >= self.room.0 {
            self.overflow += 1;
            return;
        }
        let entry = entry();
        if self.bytes + entry.len() + 1 > self.room.1 {
            self.full = true;
            self.overflow += 1;
        } else {
            self.bytes += entry.len() + 1;
            self.lines.push(entry);
        }
    }

    /// One line as ripgrep prints it: `:` after the path of a matching line, `-` after
    /// the path of a context line.
    fn line(&mut self, separator: char, number: u64, bytes: &[u8]) {
        let path = self.path;
        let line_numbers = self.line_numbers;
        self.push(|| {
            // Only what can be shown is decoded: a line may be megabytes long.
            let bytes = &bytes[..bytes.len().min(MAX_LINE_CHARS * 4 + 4)];
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
