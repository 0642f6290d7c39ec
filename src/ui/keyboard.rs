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
//! It does not render questions nor decide answers (`question`).

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, PoisonError};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;

/// Lines read from the terminal, each with the number of the question it may
/// answer.
#[derive(Debug)]
pub(super) struct Keyboard {
    terminal: Arc<Terminal>,
    lines: tokio::sync::mpsc::UnboundedReceiver<(u64, String)>,
}

#[derive(Debug)]
struct Terminal {
    input: OwnedFd,
    /// The number of the question on screen; held while input is taken.
    question: Mutex<u64>,
}

impl Keyboard {
    /// Reads lines from `input`, a terminal, from now on.
    pub(super) fn new(input: OwnedFd) -> Self {
        let terminal = Arc::new(Terminal {
            input,
            question: Mutex::new(0),
        });
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let reader = terminal.clone();
        let spawned = std::thread::Builder::new()
            .name("orchestrate-answers".into())
            .spawn(move || read_lines(&reader, &tx));
        if let Err(e) = spawned {
            // The channel is closed with the thread: every question is answered no.
            tracing::error!(error = %e, "cannot read answers from the terminal; every question will be answered no");
        }
        Self { terminal, lines }
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

/// Reads `terminal` line by line until it closes (or the receiver is gone).
fn read_lines(terminal: &Terminal, tx: &tokio::sync::mpsc::UnboundedSender<(u64, String)>) {
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    let mut stamp = 0;
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
        drop(question);
        if read == 0 {
            return;
        }
        for piece in buf[..read].split_inclusive(|b| *b == b'\n') {
            // A line belongs to the question that was on screen when it began.
            if line.is_empty() {
                stamp = now;
            }
            line.extend_from_slice(piece);
            if line.ends_with(b"\n") {
                let text = String::from_utf8_lossy(&std::mem::take(&mut line)).into_owned();
                if tx.send((stamp, text)).is_err() {
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
