//! A run's title, when the person's own file asks for one (`titles = true`):
//! the `small` model (or the run's) writes a few words from the first
//! prompt, in a task of its own that never holds the run up and is dropped
//! when the run ends first. The title is the lead's `titled` event, kept in
//! its journal, which `orchestrate sessions` lists; what it cost counts in
//! the run's listing and rows (not against `--max-cost`). Never in a replay
//! or a recording (no request the recording would not hold).

use std::sync::Arc;

use crate::actors::AbortOnDrop;
use crate::conversation::Message;
use crate::llm::{ChatRequest, Provider};
use crate::model_info::ModelInfo;
use crate::protocol::{EventKind, SessionId};
use crate::runtime::Handle;

/// What the title is asked of.
const ASK: &str = "Write a title of at most six words for the task below, as a person would \
                   name it in a list of their work. Answer with the title alone: no quotes, \
                   no punctuation at the end.";

/// The most of the prompt sent: a title needs its start.
const MAX_PROMPT: usize = 2000;

/// The longest title kept, in characters.
const MAX_TITLE: usize = 80;

/// Who writes the title.
#[derive(Clone, Debug)]
pub(super) struct Titler {
    pub(super) provider: Arc<dyn Provider>,
    pub(super) model: String,
    /// Its prices, for what the title costs.
    pub(super) info: ModelInfo,
    /// The task to title, as the person gave it.
    pub(super) task: String,
}

impl Titler {
    /// Starts writing the title of run `lead` (its lead's role `role`); the
    /// task ends with the returned guard.
    pub(super) fn start(self, handle: Handle, lead: SessionId, role: &str) -> AbortOnDrop {
        let request = request(&self.model, &self.task);
        let role = role.to_owned();
        AbortOnDrop(tokio::spawn(async move {
            let turn = match self.provider.complete(&request).await {
                Ok(turn) => turn,
                Err(e) => {
                    tracing::debug!(error = %e, "no title for the run");
                    return;
                }
            };
            let Some(title) = title_of(&turn.message.text) else {
                return;
            };
            let usage = turn.usage.unwrap_or_default();
            let cost_usd = self.info.cost(&usage);
            let publisher = handle.journaling_publisher(lead, None, &role);
            publisher.publish(EventKind::Titled {
                title,
                usage,
                cost_usd,
            });
        }))
    }
}

/// The request for the title of `prompt`, to `model`.
fn request(model: &str, prompt: &str) -> ChatRequest {
    let mut end = prompt.len().min(MAX_PROMPT);
    while !prompt.is_char_boundary(end) {
        end -= 1;
    }
    ChatRequest {
        model: model.to_owned(),
        messages: vec![Message::system(ASK), Message::user(&prompt[..end])],
        tools: Arc::from([]),
        // The provider's own limit: a small one would fall under a thinking
        // budget configured for it.
        max_tokens: None,
        place: "title".to_owned(),
    }
}

/// The title in what a model answered: its first line with words, without
/// quotes or marks around it, control characters left out, clipped.
fn title_of(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.trim_matches(|c: char| {
        matches!(c, '"' | '\'' | '#' | '*' | '`' | '.') || c.is_whitespace()
    });
    let title: String = (line.chars())
        .filter(|c| !c.is_control())
        .take(MAX_TITLE)
        .collect();
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_the_first_line_without_its_marks() {
        assert_eq!(
            title_of("\n  \"Fix the parser bug.\"\nmore").as_deref(),
            Some("Fix the parser bug")
        );
        assert_eq!(
            title_of("# **Tidy\u{1b}[31m tests**").as_deref(),
            Some("Tidy[31m tests")
        );
        assert_eq!(title_of(" \n\n"), None);
        assert_eq!(title_of(&"x".repeat(500)).map(|t| t.len()), Some(MAX_TITLE));
    }

    #[test]
    fn the_request_asks_for_a_title_of_the_prompts_start() {
        let long = "é".repeat(MAX_PROMPT);
        let request = request("small-model", &long);
        assert_eq!(request.model, "small-model");
        assert_eq!(request.place, "title");
        assert!(request.tools.is_empty());
        let Message::User { content } = &request.messages[1] else {
            panic!("{:?}", request.messages)
        };
        assert!(content.len() <= MAX_PROMPT && content.chars().all(|c| c == 'é'));
    }
}
