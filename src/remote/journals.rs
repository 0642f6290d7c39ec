//! A remote sub-agent's journal, kept in the run's stream as its worker
//! writes it: one subject per sub-agent
//! (`orchestrate.journals.<lead>.<run>.<session>`), each append fenced by the
//! last sequence of that subject the worker knows. The worker that takes a
//! task reads what the journal holds and claims it with an append of its
//! own ([`take`]) before it runs; from then on a worker the task moved away
//! from (its ack wait passed while it was stopped or cut off) cannot write,
//! and gives the task up ([`StreamJournal::fenced`]). A worker that starts
//! a task over says so in the journal ([`StreamJournal::restart`]): what
//! came before is not read again.

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishErrorKind};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::subjects;
use crate::conversation::Message;
use crate::journal::Record;
use crate::protocol::SessionId;

/// The header of a worker's claim of a journal: its name.
const CLAIM: &str = "Orchestrate-Claim";

/// The header of a claim that starts the task over.
const RESTART: &str = "Orchestrate-Restart";

/// The most bytes of lines one append carries: a longer line goes in
/// pieces of this size.
const BATCH: usize = 256 << 10;

/// Why a fenced journal takes no more.
const FENCED: &str = "another worker took its task up";

/// How often a worker reads a journal again when another worker wrote to
/// it while it read.
const TRIES: usize = 5;

/// Why an append was not kept.
#[derive(Debug)]
enum Refused {
    /// Another worker wrote to the journal since: the task is not ours.
    Fenced,
    /// The servers would not keep it.
    Failed(String),
}

/// A journal taken by this worker: the lines earlier workers wrote (since
/// the last start over), and the journal to go on writing.
#[derive(Debug)]
pub struct Taken {
    /// The lines, whole, in order.
    pub lines: Vec<u8>,
    /// The journal, claimed.
    pub journal: Arc<StreamJournal>,
}

/// Reads sub-agent `session`'s journal (of run `run` of lead `lead`) and
/// claims it as worker `worker`.
pub async fn take(
    js: &jetstream::Context,
    lead: &str,
    run: SessionId,
    session: SessionId,
    worker: &str,
) -> Result<Taken, String> {
    let stream = stream(js).await?;
    let subject = subjects::journal(lead, run, session);
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    for _ in 0..TRIES {
        let (lines, last) = read(&stream, &subject).await?;
        let mut claim = HeaderMap::new();
        claim.insert(CLAIM, worker);
        // Each try its own id: one refused must not answer the next as a
        // copy of itself.
        let id = format!("{subject}.{nonce}.0.{last}");
        match append(js, &subject, last, &id, claim, Vec::new()).await {
            Ok(at) => {
                let journal = StreamJournal::start(js.clone(), subject, at, nonce, worker);
                return Ok(Taken { lines, journal });
            }
            Err(Refused::Fenced) => continue,
            Err(Refused::Failed(why)) => return Err(why),
        }
    }
    Err("other workers kept writing its journal while this one read it".into())
}

/// The lines of sub-agent `session`'s journal (of run `run` of lead
/// `lead`) since its last start over: what its workers wrote of it.
pub async fn lines_of(
    js: &jetstream::Context,
    lead: &str,
    run: SessionId,
    session: SessionId,
) -> Result<Vec<u8>, String> {
    let stream = stream(js).await?;
    let (lines, _) = read(&stream, &subjects::journal(lead, run, session)).await?;
    Ok(lines)
}

/// The stream of the journals, found while a cluster elects.
async fn stream(js: &jetstream::Context) -> Result<jetstream::stream::Stream, String> {
    subjects::patiently(|| async {
        (js.get_stream(subjects::JOURNALS).await)
            .map_err(|e| format!("cannot find the stream {}: {e}", subjects::JOURNALS))
    })
    .await
}

/// The records of a remote sub-agent's journal its lead keeps beside its
/// own record of it: its conversation and its tools' runs, never what says
/// who it is, how it ended or what became of its work (the lead's own
/// say that).
pub fn kept_here(records: Vec<Record>) -> Vec<Record> {
    (records.into_iter())
        .filter(|r| {
            matches!(
                r,
                Record::RunStarted { .. }
                    | Record::PromptJoined { .. }
                    | Record::ToolStarted { .. }
                    | Record::Message { .. }
                    | Record::Compacted { .. }
                    | Record::Event { .. }
            )
        })
        .collect()
}

/// The lines of the journal at `subject` since its last start over, and the
/// sequence of its last message (0: none).
async fn read(stream: &jetstream::stream::Stream, subject: &str) -> Result<(Vec<u8>, u64), String> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let (mut lines, mut at) = (Vec::new(), 0);
    loop {
        let next = subjects::patiently(|| async {
            let asked = (stream.raw_message_builder())
                .sequence(at + 1)
                .next_by_subject(subject)
                .send()
                .await;
            match asked {
                Ok(message) => Ok(Some(message)),
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
                Err(e) => Err(format!("cannot read its journal: {e}")),
            }
        })
        .await?;
        let Some(message) = next else {
            whole(&mut lines);
            return Ok((lines, at));
        };
        at = message.sequence;
        let headers = &message.headers;
        if headers.get(RESTART).is_some() {
            lines.clear();
        } else if headers.get(CLAIM).is_some() {
            // A writer that died within a long line left part of it.
            whole(&mut lines);
        } else {
            lines.extend_from_slice(&message.payload);
        }
    }
}

/// `lines` without a last line cut short.
fn whole(lines: &mut Vec<u8>) {
    let kept = lines
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    lines.truncate(kept);
}

/// Appends `body` with `headers` to the journal at `subject` if its last
/// message is still at `last`; the new message's sequence. Tried again
/// while a cluster elects: its message id `id` keeps one copy.
async fn append(
    js: &jetstream::Context,
    subject: &str,
    last: u64,
    id: &str,
    mut headers: HeaderMap,
    body: Vec<u8>,
) -> Result<u64, Refused> {
    use async_nats::header::{NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, NATS_MESSAGE_ID};
    headers.insert(
        NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
        last.to_string().as_str(),
    );
    headers.insert(NATS_MESSAGE_ID, id);
    let body = bytes::Bytes::from(body);
    let kept = subjects::patiently(|| async {
        let sent = js
            .publish_with_headers(subject.to_owned(), headers.clone(), body.clone())
            .await;
        let acked = match sent {
            Ok(ack) => ack.await,
            Err(e) => return Err(format!("cannot write its journal: {e}")),
        };
        match acked {
            Ok(ack) => Ok(Ok(ack.sequence)),
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(Err(Refused::Fenced)),
            Err(e) => Err(format!("its journal did not take a write: {e}")),
        }
    })
    .await;
    match kept {
        Ok(kept) => kept,
        Err(why) => Err(Refused::Failed(why)),
    }
}

/// What the journal's writer is asked.
enum Op {
    /// Lines to keep.
    Lines(Vec<u8>),
    /// Answer once every line before is kept.
    Sync(oneshot::Sender<Result<(), String>>),
    /// Claim it again once every line before is kept (starting the task
    /// over when asked: what came before is not read again).
    Claim {
        restart: bool,
        answer: oneshot::Sender<Result<(), String>>,
    },
}

/// A claimed journal, written in order by a task of its own: lines are
/// gathered into appends, each fenced by the one before.
#[derive(Debug)]
pub struct StreamJournal {
    ops: mpsc::UnboundedSender<Op>,
    fenced: CancellationToken,
}

impl StreamJournal {
    /// Writes the journal at `subject`, claimed at sequence `at`.
    fn start(
        js: jetstream::Context,
        subject: String,
        at: u64,
        nonce: String,
        worker: &str,
    ) -> Arc<Self> {
        let (ops, rx) = mpsc::unbounded_channel();
        let fenced = CancellationToken::new();
        let writer = Writer {
            js,
            subject,
            last: at,
            nonce,
            count: 0,
            worker: worker.to_owned(),
            fenced: fenced.clone(),
        };
        tokio::spawn(writer.run(rx));
        Arc::new(Self { ops, fenced })
    }

    /// Cancelled once the journal cannot be written: another worker took
    /// the task up, or the servers would not keep a write. The task is then
    /// not this worker's to finish.
    pub fn fenced(&self) -> CancellationToken {
        self.fenced.clone()
    }

    /// Starts the task over in the journal.
    pub async fn restart(&self) -> Result<(), String> {
        self.claim(true).await
    }

    /// Waits until every line so far is kept, and claims the journal once
    /// more: whether the task is still this worker's to answer.
    pub async fn kept(&self) -> Result<(), String> {
        self.claim(false).await
    }

    async fn claim(&self, restart: bool) -> Result<(), String> {
        let (answer, rx) = oneshot::channel();
        let _ = self.ops.send(Op::Claim { restart, answer });
        rx.await
            .unwrap_or_else(|_| Err("its journal's writer is gone".into()))
    }
}

impl crate::journal::Mirror for StreamJournal {
    fn append(&self, lines: &[u8]) {
        if !self.fenced.is_cancelled() {
            let _ = self.ops.send(Op::Lines(lines.to_vec()));
        }
    }

    fn sync(&self) -> BoxFuture<'static, Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.ops.send(Op::Sync(tx));
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err("its journal's writer is gone".into()))
        })
    }
}

/// What the writer does next: the lines gathered, the syncs to answer once
/// they are kept, and a claim after them.
#[derive(Default)]
struct Batch {
    body: Vec<u8>,
    answers: Vec<oneshot::Sender<Result<(), String>>>,
    claim: Option<(bool, oneshot::Sender<Result<(), String>>)>,
}

impl Batch {
    fn take(&mut self, op: Op) {
        match op {
            Op::Lines(lines) => self.body.extend_from_slice(&lines),
            Op::Sync(answer) => self.answers.push(answer),
            Op::Claim { restart, answer } => self.claim = Some((restart, answer)),
        }
    }
}

/// The task that writes a journal.
struct Writer {
    js: jetstream::Context,
    subject: String,
    /// The sequence of the journal's last message, as this worker wrote it.
    last: u64,
    /// This claim's, in its appends' message ids.
    nonce: String,
    /// Appends made.
    count: u64,
    worker: String,
    fenced: CancellationToken,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Op>) {
        while let Some(op) = rx.recv().await {
            let mut batch = Batch::default();
            batch.take(op);
            while batch.body.len() < BATCH
                && batch.claim.is_none()
                && let Ok(op) = rx.try_recv()
            {
                batch.take(op);
            }
            let Batch {
                body,
                answers,
                claim,
            } = batch;
            let mut said = match self.fenced.is_cancelled() {
                true => Err(FENCED.to_owned()),
                false => Ok(()),
            };
            for piece in body.chunks(BATCH) {
                if said.is_ok() {
                    said = self.write(HeaderMap::new(), piece.to_vec()).await;
                }
            }
            if let Some((restart, answer)) = claim {
                let mut headers = HeaderMap::new();
                headers.insert(CLAIM, self.worker.as_str());
                if restart {
                    headers.insert(RESTART, "1");
                }
                let _ = answer.send(match said.clone() {
                    Ok(()) => self.write(headers, Vec::new()).await,
                    failed => failed,
                });
            }
            for answer in answers {
                let _ = answer.send(said.clone());
            }
        }
    }

    /// One append, fenced by the last; a refusal fences the journal.
    async fn write(&mut self, headers: HeaderMap, body: Vec<u8>) -> Result<(), String> {
        if self.fenced.is_cancelled() {
            return Err(FENCED.into());
        }
        self.count += 1;
        let id = format!("{}.{}.{}", self.subject, self.nonce, self.count);
        match append(&self.js, &self.subject, self.last, &id, headers, body).await {
            Ok(at) => {
                self.last = at;
                Ok(())
            }
            Err(refused) => {
                self.fenced.cancel();
                Err(match refused {
                    Refused::Fenced => FENCED.into(),
                    Refused::Failed(why) => why,
                })
            }
        }
    }
}

/// Whether a journal an earlier worker wrote can be taken up on another
/// machine: no call that may have changed the folder it worked in (which
/// stayed with that worker) had started. `changes` says whether a tool may.
pub fn resumable(records: &[Record], changes: impl Fn(&str) -> bool) -> bool {
    let mut tools = HashMap::new();
    let mut note = |message: &Message| {
        if let Message::Assistant(turn) = message {
            for call in &turn.tool_calls {
                tools.insert(call.id.clone(), call.name.clone());
            }
        }
    };
    for record in records {
        match record {
            Record::Message { message } => note(message),
            Record::Compacted { transcript, .. } => transcript.iter().for_each(&mut note),
            _ => {}
        }
    }
    !records.iter().any(|record| {
        matches!(record, Record::ToolStarted { call_id }
            if tools.get(call_id).is_none_or(|name| changes(name)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{AssistantMessage, ToolCall};

    fn turn(calls: &[(&str, &str)]) -> Record {
        let turn = AssistantMessage {
            tool_calls: (calls.iter())
                .map(|(id, name)| ToolCall {
                    id: (*id).into(),
                    name: (*name).into(),
                    arguments: "{}".into(),
                })
                .collect(),
            ..AssistantMessage::default()
        };
        Record::Message {
            message: Message::Assistant(turn),
        }
    }

    fn started(id: &str) -> Record {
        Record::ToolStarted { call_id: id.into() }
    }

    #[test]
    fn the_lead_keeps_a_workers_conversation_but_never_who_it_is_or_how_it_ended() {
        let session = SessionId::new();
        let records = vec![
            Record::Header {
                session,
                agent: "far".into(),
                model: "m".into(),
                parent: None,
                tool_call_id: None,
                run: None,
                format: crate::journal::FORMAT,
                checkout: None,
                remote: false,
            },
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            turn(&[("r1", "Read")]),
            started("r1"),
            Record::Committed {
                commit: "c1".into(),
            },
            Record::Terminal {
                outcome: crate::protocol::Outcome::Cancelled {
                    partial: String::new(),
                    stats: crate::protocol::RunStats::default(),
                },
            },
        ];
        let kept = kept_here(records.clone());
        assert_eq!(kept, records[1..4]);
    }

    #[test]
    fn a_line_cut_short_by_a_writer_that_died_is_not_read() {
        let mut lines = b"{\"a\":1}\n{\"b\":2}\n{\"c\"".to_vec();
        whole(&mut lines);
        assert_eq!(lines, b"{\"a\":1}\n{\"b\":2}\n");
        let mut part = b"{\"c\"".to_vec();
        whole(&mut part);
        assert!(part.is_empty());
    }

    #[test]
    fn a_journal_is_taken_up_elsewhere_only_when_nothing_may_have_changed_its_folder() {
        let changes = |name: &str| name != "Read" && name != "Grep";
        let read = [
            turn(&[("r1", "Read"), ("r2", "Grep")]),
            started("r1"),
            started("r2"),
        ];
        assert!(resumable(&read, changes));
        // A writing call asked for but never started changed nothing.
        let asked = [turn(&[("w1", "Write")])];
        assert!(resumable(&asked, changes));
        let wrote = [
            turn(&[("r1", "Read"), ("w1", "Write")]),
            started("r1"),
            started("w1"),
        ];
        assert!(!resumable(&wrote, changes));
        // A call whose tool is not known may have.
        assert!(!resumable(&[started("x9")], changes));
        // Calls remembered through a compaction count too.
        let Record::Message { message } = turn(&[("b1", "Bash")]) else {
            unreachable!()
        };
        let compacted = [
            Record::Compacted {
                transcript: vec![message],
                turns: 3,
            },
            started("b1"),
        ];
        assert!(!resumable(&compacted, changes));
    }
}
