//! The permission question at a terminal: what a person is shown before a tool call
//! with effects runs, and how their answer is read.
//!
//! The question hides nothing: every line of the command or change is shown (a
//! long one in pages; the answer is asked only after the last page), its number of
//! lines is said, and every line is shown with [`visible`] as a [`Shown::Line`].
//! Before each page's prompt, input typed ahead is discarded (`keyboard`), so no
//! keystroke made before a page was on screen can answer it. What the request
//! says (the command, the resolved path, `replace_all`) is built by
//! [`crate::tools::permissions::summarize`].

use std::io::Write;
use std::os::fd::OwnedFd;

use futures::future::BoxFuture;

use super::escape::{Shown, visible};
use super::keyboard::Keyboard;
use crate::tools::permissions::{Answer, Approver, PermissionRequest};

/// Lines per page when the terminal does not say its height.
const PAGE_LINES: usize = 40;

/// Rows of a page that are not the request's lines: the blank line and the header
/// above, the prompt below, and one for the line the person types.
const PAGE_CHROME: usize = 4;

/// Asks on a terminal: the question goes to `out` (stderr), the answer comes from
/// `input` (the terminal's stdin), one question at a time however many sessions
/// ask at once.
pub struct TerminalApprover {
    out: std::sync::Mutex<Box<dyn Write + Send>>,
    keyboard: tokio::sync::Mutex<Keyboard>,
    /// The live progress display, paused while a question waits.
    pause: Option<indicatif::MultiProgress>,
    /// The labels the display shows, to name the agent asking.
    names: super::Names,
}

impl std::fmt::Debug for TerminalApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalApprover").finish_non_exhaustive()
    }
}

impl TerminalApprover {
    /// An approver asking through `out` and reading answers from `input`, which
    /// must be a terminal (what is typed ahead is discarded from it); `pause` is
    /// the live progress display to hide while a question waits.
    pub fn new(
        out: Box<dyn Write + Send>,
        input: OwnedFd,
        pause: Option<indicatif::MultiProgress>,
    ) -> Self {
        Self {
            out: std::sync::Mutex::new(out),
            keyboard: tokio::sync::Mutex::new(Keyboard::new(input)),
            pause,
            names: super::Names::default(),
        }
    }

    /// Where the display records its rows' labels, so that each question
    /// names its agent as the tree shows it.
    pub fn names(&self) -> super::Names {
        self.names.clone()
    }

    /// The person's prompts, typed while no question is on screen (an
    /// interactive session's); `None` once taken.
    pub fn prompts(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<String>> {
        self.keyboard.try_lock().ok()?.prompts()
    }

    fn say(&self, text: &str) {
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// Shows `request` page by page and reads the answer to its last page.
    async fn pages(
        &self,
        keyboard: &mut Keyboard,
        request: &PermissionRequest,
        place: &[String],
    ) -> Answer {
        let per_page = keyboard
            .rows()
            .map_or(PAGE_LINES, |rows| rows.saturating_sub(PAGE_CHROME));
        let pages = question(request, place, per_page);
        for (i, page) in pages.iter().enumerate() {
            self.say(&page.body);
            keyboard.discard_typed_ahead();
            self.say(&page.prompt);
            let Some(line) = keyboard.line().await else {
                return Answer::No;
            };
            if i + 1 == pages.len() {
                return parse_answer(&line);
            }
            if refuses(&line) {
                return Answer::No;
            }
        }
        Answer::No
    }
}

impl Approver for TerminalApprover {
    fn name(&self) -> &'static str {
        "terminal"
    }

    fn confirm<'a>(&'a self, question: &'a str) -> BoxFuture<'a, Option<bool>> {
        Box::pin(async move {
            let mut keyboard = self.keyboard.lock().await;
            // A line typed before the question was shown answers nothing; one
            // typed once it shows does (discarding after showing it would race
            // with a quick answer, which was then lost and the run waited).
            let _asking = keyboard.asking();
            keyboard.discard_typed_ahead();
            self.say(question);
            let line = keyboard.line().await;
            Some(line.is_some_and(|line| super::trust::is_yes(&line)))
        })
    }

    fn ask(&self, request: PermissionRequest) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let place = self.names.place_when_shown(request.session).await;
            let mut keyboard = self.keyboard.lock().await;
            // Shown again however the question ends: answered, or abandoned
            // when a cancel drops this future mid-question.
            let _paused = self.pause.as_ref().map(Paused::new);
            let _asking = keyboard.asking();
            // Answered elsewhere (`orchestrate approve`, or an "always"
            // that covers it) or cancelled, the question on screen says so.
            let mut open = Open(Some(self));
            let answer = (self.pages(&mut keyboard, &request, &place.unwrap_or_default())).await;
            open.0 = None;
            answer
        })
    }
}

/// A question on screen; dropped unanswered (answered from elsewhere, or
/// its call cancelled), it says it is no longer asked.
struct Open<'a>(Option<&'a TerminalApprover>);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if let Some(approver) = self.0 {
            approver.say("(no longer asked: answered elsewhere, or the call was cancelled)\n");
        }
    }
}

/// The live display, hidden while a question is on screen and drawn again when
/// this is dropped.
struct Paused<'a>(&'a indicatif::MultiProgress);

impl<'a> Paused<'a> {
    fn new(display: &'a indicatif::MultiProgress) -> Self {
        display.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        Self(display)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0
            .set_draw_target(indicatif::ProgressDrawTarget::stderr());
    }
}

/// One page of a question: its text, then the prompt shown once what was typed
/// ahead is discarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The header and the page's lines.
    pub body: String,
    /// What the person answers: go on (or refuse), or, on the last page, the
    /// question itself.
    pub prompt: String,
}

/// The question as a person sees it, in pages of at most `per_page` lines of the
/// request: who asks (its `place` in the tree, from the root down to its
/// label, and its role; its role alone when its row is not known), every line,
/// each escaped as a [`Shown::Line`], how many there are, and how many other
/// questions wait. Every page but the last asks to go on; the last asks the
/// question.
pub fn question(request: &PermissionRequest, place: &[String], per_page: usize) -> Vec<Page> {
    let mut lines: Vec<&str> = request.summary.split('\n').collect();
    if lines.len() > 1 && lines.last() == Some(&"") {
        lines.pop();
    }
    let total = lines.len();
    let chunks: Vec<&[&str]> = lines.chunks(per_page.max(1)).collect();
    let agent = match place.last() {
        None => visible(&request.agent, Shown::Line).into_owned(),
        Some(label) => {
            let path = visible(&place.join(" › "), Shown::Line).into_owned();
            match label == &request.agent {
                true => path,
                false => format!("{path} ({})", visible(&request.agent, Shown::Line)),
            }
        }
    };
    let behind = match request.waiting {
        0 => String::new(),
        1 => "; 1 more question waits".to_owned(),
        n => format!("; {n} more questions wait"),
    };
    let tool = visible(&request.tool, Shown::Line);
    let mut first = 1;
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let count = match (total, chunks.len()) {
                (1, _) => String::new(),
                (_, 1) => format!(" ({total} lines)"),
                (_, n) => format!(" ({total} lines, page {} of {n})", i + 1),
            };
            let mut body = format!("\n{agent} wants to run {tool}{count}{behind}:\n");
            for line in *chunk {
                body.push_str("  ");
                body.push_str(&visible(line, Shown::Line));
                body.push('\n');
            }
            let last = first + chunk.len() - 1;
            let prompt = if i + 1 == chunks.len() {
                "Allow? [y]es / [n]o / [a]lways: ".to_owned()
            } else {
                format!(
                    "-- lines {first}-{last} of {total}; Enter for the next page, [n]o to refuse: "
                )
            };
            first = last + 1;
            Page { body, prompt }
        })
        .collect()
}

/// Reads an answer: `y`/`yes`, `a`/`always`; anything else (or nothing) is no.
pub fn parse_answer(line: &str) -> Answer {
    Answer::from_word(line).unwrap_or(Answer::No)
}

/// Whether a line typed at a page that is not the last refuses the call (anything
/// else shows the next page; nothing but the last page's answer allows it).
fn refuses(line: &str) -> bool {
    matches!(line.trim().to_ascii_lowercase().as_str(), "n" | "no")
}

#[cfg(test)]
mod tests;
