//! The questions of a run that wait for an answer, by id: whoever answers one
//! (the approver, `orchestrate approve` from another terminal, the timeout, or
//! another question's "always" or "no" that covers it), its call gets exactly
//! that answer, once. The approver puts them to a person one at a time, in the
//! order they came (`Questions::turn`).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::Answer;
use crate::protocol::SessionId;

/// Who or what gave an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum By {
    /// The run's approver (its name: `terminal`, `program`, `http`, `nobody`).
    Approver(&'static str),
    /// `orchestrate approve`, from another terminal.
    Approve,
    /// Nobody answered within the approval timeout.
    Timeout,
    /// Question `0` was answered "always", which allows this call too.
    Always(String),
    /// The person refused question `0`, an earlier call of this call's turn.
    Refusal(String),
}

impl By {
    /// How the `permission_answered` event names it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Approver(name) => name,
            Self::Approve => "approve",
            Self::Timeout => "timeout",
            Self::Always(_) => "always",
            Self::Refusal(_) => "refusal",
        }
    }

    /// The question whose answer covered this one.
    pub fn covered_by(&self) -> Option<&str> {
        match self {
            Self::Always(id) | Self::Refusal(id) => Some(id),
            Self::Approver(_) | Self::Approve | Self::Timeout => None,
        }
    }
}

/// An answer and who gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The answer.
    pub answer: Answer,
    /// Who gave it.
    pub by: By,
}

/// A question waiting for its answer, as `orchestrate ps` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingQuestion {
    /// Its id (`q-` and 12 hex digits).
    pub id: String,
    /// The session asking.
    pub session: SessionId,
    /// The tool.
    pub tool: String,
    /// What the call would do.
    pub summary: String,
}

/// What a question is about, for the answers that cover others.
#[derive(Debug)]
pub(crate) struct Asked {
    /// The question as listed.
    pub(crate) question: PendingQuestion,
    /// The call's input.
    pub(crate) input: serde_json::Value,
    /// Whether an "always" may answer it (a rule or a hook that asks wants the
    /// person's own answer, each time).
    pub(crate) coverable: bool,
    /// Its tool turn's "the person refused a call" flag: the same `Arc` for
    /// every call of one turn.
    pub(crate) turn: Arc<AtomicBool>,
}

struct Waiter {
    asked: Asked,
    tx: oneshot::Sender<Decision>,
}

/// Every question of a run that waits for an answer.
#[derive(Default)]
pub struct Questions {
    /// In the order they were asked.
    waiting: Mutex<Vec<Waiter>>,
    /// The turn to be put to a person: one question at a time.
    turn: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Questions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Questions")
            .field("waiting", &self.pending().len())
            .finish()
    }
}

/// A question on the desk; it leaves the desk when dropped.
#[derive(Debug)]
pub(crate) struct Open<'a> {
    desk: &'a Questions,
    /// Its id.
    pub(crate) id: String,
    /// Its answer, whoever gives it.
    pub(crate) answer: oneshot::Receiver<Decision>,
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.desk.lock().retain(|w| w.asked.question.id != self.id);
    }
}

impl Questions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiter>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts a question on the desk, under a new id.
    pub(crate) fn open(&self, mut asked: Asked) -> Open<'_> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let id = format!("q-{}", &id[..12]);
        asked.question.id.clone_from(&id);
        let (tx, answer) = oneshot::channel();
        self.lock().push(Waiter { asked, tx });
        Open {
            desk: self,
            id,
            answer,
        }
    }

    /// The turn to put a question to a person: held while it is on screen.
    pub(crate) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// The questions waiting, in the order they were asked.
    pub fn pending(&self) -> Vec<PendingQuestion> {
        self.lock()
            .iter()
            .map(|w| w.asked.question.clone())
            .collect()
    }

    /// How many questions wait besides `id`.
    pub fn besides(&self, id: &str) -> usize {
        self.lock()
            .iter()
            .filter(|w| w.asked.question.id != id)
            .count()
    }

    /// Answers `session`'s question `id`, or its only one when `id` is `None`.
    /// The id answered, or why none was (none waits, several do, no such id).
    pub fn answer(
        &self,
        session: SessionId,
        id: Option<&str>,
        decision: Decision,
    ) -> Result<String, String> {
        let mut waiting = self.lock();
        let theirs: Vec<usize> = (0..waiting.len())
            .filter(|&i| waiting[i].asked.question.session == session)
            .collect();
        let at = match (id, theirs.as_slice()) {
            (_, []) => return Err("has no question waiting for an answer".into()),
            (Some(id), _) => *theirs
                .iter()
                .find(|&&i| waiting[i].asked.question.id == id)
                .ok_or_else(|| {
                    format!(
                        "has no question {id} waiting (its questions: {})",
                        ids(&waiting, &theirs)
                    )
                })?,
            (None, [only]) => *only,
            (None, several) => {
                return Err(format!(
                    "has {} questions waiting ({}): say which with --id",
                    several.len(),
                    ids(&waiting, several)
                ));
            }
        };
        let waiter = waiting.remove(at);
        let id = waiter.asked.question.id.clone();
        waiter
            .tx
            .send(decision)
            .map(|()| id)
            .map_err(|_| "its question was answered meanwhile".into())
    }

    /// Takes question `id` off the desk: whether it was still there (not
    /// answered from elsewhere meanwhile).
    pub(crate) fn withdraw(&self, id: &str) -> bool {
        let mut waiting = self.lock();
        let before = waiting.len();
        waiting.retain(|w| w.asked.question.id != id);
        waiting.len() < before
    }

    /// Answers every waiting question `covers` picks with `decision`.
    pub(crate) fn cover(&self, covers: impl Fn(&Asked) -> bool, decision: &Decision) {
        let mut waiting = self.lock();
        let (covered, kept): (Vec<Waiter>, Vec<Waiter>) =
            waiting.drain(..).partition(|w| covers(&w.asked));
        *waiting = kept;
        drop(waiting);
        for waiter in covered {
            let _ = waiter.tx.send(decision.clone());
        }
    }
}

fn ids(waiting: &[Waiter], at: &[usize]) -> String {
    let ids: Vec<&str> = at
        .iter()
        .map(|&i| waiting[i].asked.question.id.as_str())
        .collect();
    ids.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(session: SessionId, turn: &Arc<AtomicBool>) -> Asked {
        Asked {
            question: PendingQuestion {
                id: String::new(),
                session,
                tool: "Bash".into(),
                summary: "make".into(),
            },
            input: serde_json::json!({"command": "make"}),
            coverable: true,
            turn: turn.clone(),
        }
    }

    fn yes() -> Decision {
        Decision {
            answer: Answer::Yes,
            by: By::Approve,
        }
    }

    #[test]
    fn an_answer_goes_to_the_question_it_names_and_only_once() {
        let desk = Questions::default();
        let (one, two) = (SessionId::new(), SessionId::new());
        let turn = Arc::default();
        let mut a = desk.open(asked(one, &turn));
        let mut b = desk.open(asked(two, &turn));
        let mut c = desk.open(asked(two, &turn));
        assert!(a.id.starts_with("q-") && a.id.len() == 14, "{}", a.id);
        assert_eq!(desk.pending().len(), 3);
        assert_eq!(desk.besides(&a.id), 2);

        // One question: no id needed.
        assert_eq!(desk.answer(one, None, yes()), Ok(a.id.clone()));
        assert_eq!(a.answer.try_recv().unwrap(), yes());
        let again = desk.answer(one, None, yes()).unwrap_err();
        assert_eq!(again, "has no question waiting for an answer");

        // Two: the id is needed, and must be that agent's.
        let several = desk.answer(two, None, yes()).unwrap_err();
        assert!(several.contains("2 questions waiting"), "{several}");
        assert!(several.contains(&b.id) && several.contains(&c.id));
        let wrong = desk.answer(two, Some(&a.id), yes()).unwrap_err();
        assert!(wrong.contains(&format!("no question {}", a.id)), "{wrong}");
        assert_eq!(desk.answer(two, Some(&c.id), yes()), Ok(c.id.clone()));
        assert!(c.answer.try_recv().is_ok());
        assert!(b.answer.try_recv().is_err(), "b is still waiting");

        // A question dropped (its call cancelled) leaves the desk.
        drop(b);
        assert!(desk.pending().is_empty());
    }

    #[test]
    fn a_covering_answer_reaches_exactly_the_questions_it_covers() {
        let desk = Questions::default();
        let (mine, other) = (Arc::default(), Arc::default());
        let session = SessionId::new();
        let mut a = desk.open(asked(session, &mine));
        let mut b = desk.open(asked(session, &other));
        let no = Decision {
            answer: Answer::No,
            by: By::Refusal("q-1".into()),
        };
        desk.cover(|w| Arc::ptr_eq(&w.turn, &mine), &no);
        assert_eq!(a.answer.try_recv().unwrap(), no);
        assert!(b.answer.try_recv().is_err());
        assert_eq!(desk.pending().len(), 1);
        assert_eq!(no.by.name(), "refusal");
        assert_eq!(no.by.covered_by(), Some("q-1"));
    }
}
