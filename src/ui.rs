//! The one module that talks to a person at a terminal. For now: the permission
//! prompt. (The live progress display joins it with the sub-agents.)

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::tools::permissions::{Answer, Approver, PermissionRequest};

/// Asks on a terminal: the question goes to `out` (stderr), the answer comes from
/// `input` (stdin), one question at a time however many sessions ask at once.
pub struct TerminalApprover {
    io: Arc<Mutex<TerminalIo>>,
}

struct TerminalIo {
    out: Box<dyn Write + Send>,
    input: Box<dyn BufRead + Send>,
}

impl std::fmt::Debug for TerminalApprover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalApprover").finish_non_exhaustive()
    }
}

impl TerminalApprover {
    /// An approver asking through `out` and reading answers from `input`.
    pub fn new(out: Box<dyn Write + Send>, input: Box<dyn BufRead + Send>) -> Self {
        Self {
            io: Arc::new(Mutex::new(TerminalIo { out, input })),
        }
    }
}

/// The question as a person sees it.
pub fn question(request: &PermissionRequest) -> String {
    let mut detail = String::new();
    for line in request.summary.lines().take(40) {
        detail.push_str("  ");
        detail.push_str(line);
        detail.push('\n');
    }
    format!(
        "\n{} wants to run {}:\n{detail}Allow? [y]es / [n]o / [a]lways for this session: ",
        request.agent, request.tool
    )
}

/// Reads an answer: `y`/`yes`, `a`/`always`; anything else (or nothing) is no.
pub fn parse_answer(line: &str) -> Answer {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Yes,
        "a" | "always" => Answer::Always,
        _ => Answer::No,
    }
}

impl Approver for TerminalApprover {
    fn ask(&self, request: PermissionRequest) -> BoxFuture<'_, Answer> {
        let io = self.io.clone();
        Box::pin(async move {
            let asked = tokio::task::spawn_blocking(move || {
                let mut io = io.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let _ = write!(io.out, "{}", question(&request));
                let _ = io.out.flush();
                let mut line = String::new();
                match io.input.read_line(&mut line) {
                    Ok(0) | Err(_) => Answer::No,
                    Ok(_) => parse_answer(&line),
                }
            })
            .await;
            asked.unwrap_or(Answer::No)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SessionId;

    #[test]
    fn the_question_names_the_agent_and_shows_the_command() {
        let request = PermissionRequest {
            session: SessionId::new(),
            agent: "coder#2".into(),
            tool: "Bash".into(),
            summary: "cargo test --all".into(),
        };
        assert_eq!(
            question(&request),
            "\ncoder#2 wants to run Bash:\n  cargo test --all\nAllow? [y]es / [n]o / [a]lways for this session: "
        );
    }

    #[test]
    fn answers_are_read_leniently_and_default_to_no() {
        assert_eq!(parse_answer("Y\n"), Answer::Yes);
        assert_eq!(parse_answer(" always "), Answer::Always);
        assert_eq!(parse_answer("\n"), Answer::No);
        assert_eq!(parse_answer("sure"), Answer::No);
    }

    #[tokio::test]
    async fn a_terminal_answer_is_read_back() {
        let out: Vec<u8> = Vec::new();
        let approver = TerminalApprover::new(
            Box::new(out),
            Box::new(std::io::Cursor::new(b"a\n".to_vec())),
        );
        let request = PermissionRequest {
            session: SessionId::new(),
            agent: "main".into(),
            tool: "Edit".into(),
            summary: "src/lib.rs".into(),
        };
        assert_eq!(approver.ask(request.clone()).await, Answer::Always);
        // The input is exhausted: no answer is a no.
        assert_eq!(approver.ask(request).await, Answer::No);
    }
}
