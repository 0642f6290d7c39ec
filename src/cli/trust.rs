//! Asking the person what only they may allow: a workspace whose files send
//! model requests to addresses of their own, or start MCP servers (the setup's
//! questions, `crate::setup::Question`). Each is shown whole (escaped: it comes
//! from the repository) and answered on the terminal through the approver; with
//! nobody there, nothing is answered. What a question means, and remembering a
//! yes, are the setup's.

use crate::setup::Question;
use crate::tools::permissions::Approver;
use crate::ui;

/// The person's answers to `questions`, in order (`None`: nobody to ask). A no
/// to the addresses ends the run, so nothing after it is asked.
pub(super) async fn ask(questions: &[Question], approver: &dyn Approver) -> Vec<Option<bool>> {
    let mut answers = Vec::new();
    for question in questions {
        let (shown, ends_the_run) = match question {
            Question::Addresses { file, redirects } => (ui::trust::question(file, redirects), true),
            Question::Servers(servers) => (ui::trust::mcp_question(servers), false),
        };
        let answer = approver.confirm(&shown).await;
        answers.push(answer);
        if ends_the_run && answer != Some(true) {
            break;
        }
    }
    answers
}

/// A person at the terminal, for the tests of trust questions.
#[cfg(test)]
pub(super) mod person {
    use std::sync::Mutex;

    use futures::future::BoxFuture;

    use crate::tools::permissions::{Answer, Approver, PermissionRequest};

    /// Answers every trust question with `answer` (`None`: nobody is there), and
    /// keeps the questions shown.
    #[derive(Debug)]
    pub(in crate::cli) struct Person {
        answer: Option<bool>,
        pub(in crate::cli) shown: Mutex<Vec<String>>,
    }

    impl Person {
        pub(in crate::cli) fn new(answer: Option<bool>) -> Self {
            Self {
                answer,
                shown: Mutex::new(Vec::new()),
            }
        }
    }

    impl Approver for Person {
        fn ask(&self, _request: PermissionRequest) -> BoxFuture<'_, Answer> {
            Box::pin(async { Answer::No })
        }

        fn confirm<'a>(&'a self, question: &'a str) -> BoxFuture<'a, Option<bool>> {
            self.shown.lock().unwrap().push(question.to_owned());
            Box::pin(async { self.answer })
        }
    }
}
