//! The lines a person types at the terminal, for the permission question, and the
//! rule that only a line typed after a question is shown can answer it.
//!
//! A thread of its own reads the terminal (never a task of the runtime: a blocking
//! read would keep the process from exiting when a question is abandoned by a
//! cancel). It takes input only while it holds the lock on the number of the
//! question on screen, and stamps each line with that number; showing a question
//! takes the same lock, discards whatever the terminal holds (typed ahead, with or
//! without Enter) and moves the number on. So a line is either discarded, read
//! under an earlier number (and ignored), or typed after the discard.
//!
//! In an interactive session the same thread reads the person's prompts: a
//! line typed while no question is on screen is a prompt ([`Keyboard::prompts`]),
//! and the lines of one paste (between the terminal's bracketed-paste marks)
//! are one prompt ([`Paste`]).
//!
//! It does not render questions nor decide answers (`question`).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;

/// Lines read from the terminal, each with the number of the question it may
/// answer.
#[derive(Debug)]
pub(super) struct Keyboard {
    terminal: Arc<Terminal>,
    lines: tokio::sync::mpsc::UnboundedReceiver<(u64, String)>,
    /// The prompts, until someone takes them.
    prompts: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
}

#[derive(Debug)]
struct Terminal {
    input: OwnedFd,
    /// The number of the question on screen; held while input is taken.
    question: Mutex<u64>,
    /// A question is on screen: what is typed answers it.
    asking: AtomicBool,
    /// Someone reads prompts: what is typed while no question is on screen
    /// goes to them.
    prompting: AtomicBool,
}

impl Keyboard {
    /// Reads lines from `input`, a terminal, from now on.
    pub(super) fn new(input: OwnedFd) -> Self {
        let terminal = Arc::new(Terminal {
            input,
            question: Mutex::new(0),
            asking: AtomicBool::new(false),
            prompting: AtomicBool::new(false),
        });
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let (prompt_tx, prompts) = tokio::sync::mpsc::unbounded_channel();
        let reader = terminal.clone();
        let spawned = std::thread::Builder::new()
            .name("orchestrate-answers".into())
            .spawn(move || read_lines(&reader, &tx, &prompt_tx));
        if let Err(e) = spawned {
            // The channel is closed with the thread: every question is answered no.
            tracing::error!(error = %e, "cannot read answers from the terminal; every question will be answered no");
        }
        Self {
            terminal,
            lines,
            prompts: Some(prompts),
        }
    }

    /// The prompts typed from now on while no question is on screen (a
    /// paste is one); `None` once taken. The channel closes when the
    /// terminal does (Ctrl-D at an empty line).
    pub(super) fn prompts(&mut self) -> Option<tokio::sync::mpsc::UnboundedReceiver<String>> {
        let prompts = self.prompts.take()?;
        self.terminal.prompting.store(true, Ordering::SeqCst);
        Some(prompts)
    }

    /// Held while a question is on screen: once dropped (answered, or
    /// abandoned by a cancel), what is typed is a prompt again.
    pub(super) fn asking(&self) -> Asking {
        Asking(self.terminal.clone())
    }

    /// Discards everything typed so far, read or not, and makes the next line the
    /// answer to a new question. Called right before each question is shown.
    pub(super) fn discard_typed_ahead(&mut self) {
        let mut question = self
            .terminal
            .question
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // What the terminal holds and no one has read yet, a line not finished with
        // Enter included.
        if let Err(e) =
            rustix::termios::tcflush(&self.terminal.input, rustix::termios::QueueSelector::IFlush)
        {
            tracing::warn!(error = %e, "cannot discard input typed ahead");
        }
        // What was read already is stamped with an earlier question.
        *question += 1;
        self.terminal.asking.store(true, Ordering::SeqCst);
    }

    /// The next line typed since the last [`discard_typed_ahead`](Self::discard_typed_ahead),
    /// or `None` once the terminal is closed.
    pub(super) async fn line(&mut self) -> Option<String> {
        let current = *self
            .terminal
            .question
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            let (question, line) = self.lines.recv().await?;
            if question == current {
                return Some(line);
            }
        }
    }

    /// The terminal's height in rows, when it says.
    pub(super) fn rows(&self) -> Option<usize> {
        let size = rustix::termios::tcgetwinsize(&self.terminal.input).ok()?;
        (size.ws_row > 0).then_some(usize::from(size.ws_row))
    }
}

/// A question on screen; what is typed is a prompt again once dropped.
#[derive(Debug)]
pub(super) struct Asking(Arc<Terminal>);

impl Drop for Asking {
    fn drop(&mut self) {
        // What was typed for the question (answered, or abandoned by a
        // cancel) is no prompt.
        let mut question = self
            .0
            .question
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = rustix::termios::tcflush(&self.0.input, rustix::termios::QueueSelector::IFlush);
        *question += 1;
        self.0.asking.store(false, Ordering::SeqCst);
    }
}

/// Reads `terminal` line by line until it closes (or the receiver is gone):
/// answers to `tx`, prompts to `prompts`.
fn read_lines(
    terminal: &Terminal,
    tx: &tokio::sync::mpsc::UnboundedSender<(u64, String)>,
    prompts: &tokio::sync::mpsc::UnboundedSender<String>,
) {
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    let mut stamp = 0;
    let mut prompt = false;
    let mut paste = Paste::default();
    let mut last_question = 0;
    loop {
        // Wait for input without taking it, so that a question shown meanwhile
        // still discards it.
        if let Err(e) = ready(terminal, None) {
            tracing::warn!(error = %e, "cannot wait for answers from the terminal");
            return;
        }
        let question = terminal
            .question
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Discarded while this thread waited for the lock: wait again.
        if !matches!(ready(terminal, Some(&Timespec::default())), Ok(true)) {
            continue;
        }
        let read = match rustix::io::read(&terminal.input, &mut buf) {
            Ok(read) => read,
            Err(Errno::INTR | Errno::AGAIN) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read answers from the terminal");
                return;
            }
        };
        let now = *question;
        // Whether a question is on screen, read under the same lock as its
        // number: a question shown after this read has discarded what it read.
        let asking = terminal.asking.load(Ordering::SeqCst);
        drop(question);
        // A question came (and may have gone): a paste it cut is over.
        if now != last_question {
            paste = Paste::default();
            last_question = now;
        }
        if read == 0 {
            return;
        }
        for piece in buf[..read].split_inclusive(|b| *b == b'\n') {
            // A line belongs to the question that was on screen when it began
            // (or is a prompt, when none was and someone reads prompts).
            if line.is_empty() {
                stamp = now;
                prompt = terminal.prompting.load(Ordering::SeqCst) && !asking;
            }
            line.extend_from_slice(piece);
            if line.ends_with(b"\n") {
                let text = String::from_utf8_lossy(&std::mem::take(&mut line)).into_owned();
                let sent = match prompt {
                    true => match paste.line(&text) {
                        Some(whole) => prompts.send(whole).is_ok(),
                        None => true,
                    },
                    false => {
                        // A paste cut by a question ends with it.
                        paste = Paste::default();
                        tx.send((stamp, text)).is_ok()
                    }
                };
                if !sent {
                    return;
                }
            }
        }
    }
}

/// Whether the terminal has input (a whole line, on a terminal in canonical mode)
/// or has closed, waiting up to `timeout` (forever with `None`).
fn ready(terminal: &Terminal, timeout: Option<&Timespec>) -> rustix::io::Result<bool> {
    loop {
        let mut fds = [PollFd::new(&terminal.input, PollFlags::IN)];
        match poll(&mut fds, timeout) {
            Ok(n) => return Ok(n > 0),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The terminal's marks around pasted text (bracketed paste).
const PASTE_START: &str = "\x1b[200~";
const PASTE_END: &str = "\x1b[201~";

/// Prompts from lines as the terminal gives them: a line is a prompt, and
/// the lines of one paste, with what is typed on the line where it ends, are
/// one prompt. Pure.
#[derive(Debug, Default)]
pub(crate) struct Paste {
    /// Inside a paste.
    inside: bool,
    /// What the prompt has so far.
    text: String,
}

impl Paste {
    /// Takes one line (with its line break): the prompt once it is whole.
    pub(crate) fn line(&mut self, line: &str) -> Option<String> {
        let mut rest = line.trim_end_matches(['\n', '\r']);
        loop {
            let mark = if self.inside { PASTE_END } else { PASTE_START };
            match rest.find(mark) {
                Some(at) => {
                    self.text.push_str(&rest[..at]);
                    rest = &rest[at + mark.len()..];
                    self.inside = !self.inside;
                }
                None => {
                    self.text.push_str(rest);
                    break;
                }
            }
        }
        if self.inside {
            self.text.push('\n');
            return None;
        }
        let prompt = std::mem::take(&mut self.text);
        Some(prompt.trim_end().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_a_prompt_and_a_paste_of_many_lines_is_one() {
        let mut paste = Paste::default();
        assert_eq!(paste.line("fix it\n").as_deref(), Some("fix it"));
        let lines: Vec<String> = (1..=20).map(|i| format!("line {i}")).collect();
        let mut got = None;
        for (i, line) in lines.iter().enumerate() {
            let typed = match i {
                0 => format!("{PASTE_START}{line}\n"),
                _ => format!("{line}\n"),
            };
            assert_eq!(got, None);
            got = paste.line(&typed);
        }
        assert_eq!(got, None, "the paste goes on until its end mark");
        // The end mark, then what was typed after it, then Enter.
        let whole = paste.line(&format!("{PASTE_END} please\n")).unwrap();
        assert_eq!(whole, format!("{}\n please", lines.join("\n")));
        // A paste within one line.
        let one = paste.line(&format!("see {PASTE_START}a.rs{PASTE_END} now\r\n"));
        assert_eq!(one.as_deref(), Some("see a.rs now"));
    }
}
