//! Where a session restarted from its journal picks up. Pure code.

use crate::conversation::{Message, ToolCall, ToolResult};
use crate::journal::Record;

/// The state a journal describes.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Resumed {
    /// Every message, in order.
    pub(crate) transcript: Vec<Message>,
    /// The run in progress when the journal ends, if one was.
    pub(crate) active: Option<ActiveRun>,
}

/// A run the journal shows as started but not ended.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ActiveRun {
    /// The prompts it answers, the one that started it first.
    pub(crate) prompts: Vec<u64>,
    /// Model turns it had made.
    pub(crate) turns: u32,
    /// What to do next.
    pub(crate) next: Next,
    /// Its background sub-agents whose results it has not had: the Task call
    /// that started each, and its task id.
    pub(crate) background: Vec<(ToolCall, crate::protocol::SessionId)>,
}

/// The next step of a resumed run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Next {
    /// Ask the model (the last message is a prompt or a tool result).
    Request,
    /// The last turn's calls without results, in call order.
    Tools(Vec<Pending>),
    /// The model had given its final answer; only the terminal record is missing.
    Finish(String),
}

/// A call of the last turn that has no result.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Pending {
    /// The call.
    pub(crate) call: ToolCall,
    /// Its place among the turn's calls, from 0.
    pub(crate) position: usize,
    /// Whether it had started, and so may have had effects.
    pub(crate) started: bool,
}

/// Reads the records of one journal.
pub(crate) fn resume(records: &[Record]) -> Resumed {
    let mut transcript = Vec::new();
    let mut run_start: Option<usize> = None;
    let mut prompts: Vec<u64> = Vec::new();
    let mut started: Vec<&str> = Vec::new();
    let mut turns_before = 0;
    let mut pairing = Pairing::default();
    let mut background = Background::default();
    for record in records {
        match record {
            Record::Header { .. }
            | Record::Event { .. }
            | Record::Limits { .. }
            | Record::Committed { .. }
            | Record::Checked { .. }
            | Record::Fetched { .. }
            | Record::Merging { .. }
            | Record::Merged { .. }
            | Record::Narrowed { .. }
            | Record::CheckoutRemoved => {}
            Record::RunStarted { prompt, .. } => {
                pairing.close(&mut transcript);
                turns_before = 0;
                run_start = Some(transcript.len());
                prompts = vec![*prompt];
                started.clear();
                background = Background::default();
            }
            Record::PromptJoined {
                prompt,
                background: task,
            } => {
                prompts.push(*prompt);
                background.delivered.extend(*task);
            }
            Record::ToolStarted { call_id } => started.push(call_id),
            Record::Message { message } => {
                background.see(message);
                pairing.push(&mut transcript, message);
            }
            Record::Compacted {
                transcript: compacted,
                turns,
            } => {
                pairing = Pairing::default();
                // The run goes on from the compacted conversation (compaction
                // happens at a turn boundary, so no call of it is pending), its
                // turns counted on from where it was.
                transcript = compacted.clone();
                if run_start.is_some() {
                    run_start = Some(transcript.len());
                    turns_before = *turns;
                }
            }
            Record::Terminal { .. } => run_start = None,
        }
    }
    // A marker is journaled together with its prompt, but a torn write can keep
    // the one without the other: a run whose prompt was lost never started, and
    // a prompt that did not make it never joined.
    match records.last() {
        Some(Record::RunStarted { .. }) => run_start = None,
        Some(Record::PromptJoined { .. }) => {
            prompts.pop();
        }
        _ => {}
    }
    let active = run_start.map(|start| {
        let run = &transcript[start..];
        let is_assistant = |m: &Message| match m {
            Message::Assistant(_) => true,
            Message::System { .. } | Message::User { .. } | Message::Tool(_) => false,
        };
        let turns = turns_before + run.iter().filter(|m| is_assistant(m)).count() as u32;
        let next = match run.iter().rposition(is_assistant).map(|i| (i, &run[i])) {
            Some((i, Message::Assistant(a))) if !a.tool_calls.is_empty() => {
                let answered: Vec<&str> = run[i + 1..]
                    .iter()
                    .filter_map(|m| match m {
                        Message::Tool(r) => Some(r.tool_call_id.as_str()),
                        Message::System { .. } | Message::User { .. } | Message::Assistant(_) => {
                            None
                        }
                    })
                    .collect();
                let pending: Vec<Pending> = a
                    .tool_calls
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| !answered.contains(&c.id.as_str()))
                    .map(|(position, c)| Pending {
                        call: c.clone(),
                        position,
                        started: started.contains(&c.id.as_str()),
                    })
                    .collect();
                if pending.is_empty() {
                    Next::Request
                } else {
                    Next::Tools(pending)
                }
            }
            Some((i, Message::Assistant(a))) if i + 1 == run.len() => {
                Next::Finish(a.answer().to_owned())
            }
            Some(_) | None => Next::Request,
        };
        ActiveRun {
            prompts: prompts.clone(),
            turns,
            next,
            background: background.undelivered(),
        }
    });
    Resumed { transcript, active }
}

/// A run's background sub-agents, as its journal tells them: the Task calls
/// whose results say one started, and the task ids whose results the run had
/// (a message that joined it, or a `TaskOutput` result that was not
/// `running`). Read from the records, not the transcript, so that a
/// compaction does not hide them.
#[derive(Default)]
struct Background {
    /// The run's Task calls so far, by id.
    calls: Vec<ToolCall>,
    /// The run's `TaskOutput` calls so far: call id and the task it reads.
    outputs: Vec<(String, crate::protocol::SessionId)>,
    /// The background sub-agents started: their call and task id.
    started: Vec<(ToolCall, crate::protocol::SessionId)>,
    /// The task ids whose results joined the run.
    delivered: Vec<crate::protocol::SessionId>,
}

impl Background {
    fn see(&mut self, message: &Message) {
        match message {
            Message::Assistant(a) => {
                let tasks = a.tool_calls.iter().filter(|c| c.name == "Task");
                self.calls.extend(tasks.cloned());
                let outputs = a.tool_calls.iter().filter(|c| c.name == "TaskOutput");
                self.outputs.extend(outputs.filter_map(|c| {
                    let input = c.parsed_arguments().ok()?;
                    let task = input.get("task_id")?.as_str()?.trim().parse().ok()?;
                    Some((c.id.clone(), task))
                }));
            }
            Message::Tool(result) if !result.is_error => {
                let output = self
                    .outputs
                    .iter()
                    .find(|(id, _)| *id == result.tool_call_id);
                if let Some((_, task)) = output
                    && !result.content.starts_with("running\n")
                {
                    self.delivered.push(*task);
                }
                let call = self.calls.iter().find(|c| c.id == result.tool_call_id);
                if let (Some(call), Some(task)) =
                    (call, crate::protocol::background_task(&result.content))
                {
                    self.started.push((call.clone(), task));
                }
            }
            Message::Tool(_) | Message::System { .. } | Message::User { .. } => {}
        }
    }

    fn undelivered(&self) -> Vec<(ToolCall, crate::protocol::SessionId)> {
        (self.started.iter())
            .filter(|(_, task)| !self.delivered.contains(task))
            .cloned()
            .collect()
    }
}

/// Keeps a transcript rebuilt from a journal well formed: each call answered
/// once, after its turn and before the conversation moves on. A damaged line
/// skipped from the middle of a journal can leave a result without its call
/// (dropped: no provider takes it) or a call without its result (answered as
/// interrupted once a later turn or prompt shows it will get none).
#[derive(Default)]
struct Pairing {
    /// The calls of the last model turn that have no result yet.
    unanswered: Vec<String>,
}

impl Pairing {
    fn push(&mut self, transcript: &mut Vec<Message>, message: &Message) {
        match message {
            Message::Tool(result) => {
                let id = &result.tool_call_id;
                let Some(at) = self.unanswered.iter().position(|c| c == id) else {
                    return;
                };
                self.unanswered.remove(at);
            }
            Message::Assistant(turn) => {
                self.close(transcript);
                self.unanswered = turn.tool_calls.iter().map(|c| c.id.clone()).collect();
            }
            Message::User { .. } => self.close(transcript),
            Message::System { .. } => {}
        }
        transcript.push(message.clone());
    }

    /// The conversation moves on: calls still unanswered get no result.
    fn close(&mut self, transcript: &mut Vec<Message>) {
        for id in self.unanswered.drain(..) {
            transcript.push(Message::Tool(ToolResult::interrupted(id)));
        }
    }
}

/// Splits a resumed turn's unfinished calls into those safe to run now (never
/// started, or of a tool that is `replayable`: read-only, or resumable by its call
/// id) and those that may have had effects already, which the model is told were
/// interrupted rather than running them twice.
pub(crate) fn replay_or_lost(
    pending: Vec<Pending>,
    replayable: impl Fn(&str) -> bool,
) -> (Vec<Pending>, Vec<ToolCall>) {
    let (lost, replay): (Vec<Pending>, Vec<Pending>) = pending
        .into_iter()
        .partition(|p| p.started && !replayable(&p.call.name));
    (replay, lost.into_iter().map(|p| p.call).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn started_calls_with_effects_are_lost_and_the_rest_run_again() {
        let pending = |name: &str, started: bool| Pending {
            call: ToolCall {
                id: format!("{name}-{started}"),
                name: name.into(),
                arguments: "{}".into(),
            },
            position: 0,
            started,
        };
        let (replay, lost) = replay_or_lost(
            vec![
                pending("Write", true),
                pending("Write", false),
                pending("Read", true),
            ],
            |name| name == "Read",
        );
        let replayed: Vec<String> = replay.into_iter().map(|p| p.call.id).collect();
        assert_eq!(replayed, ["Write-false", "Read-true"]);
        let lost: Vec<String> = lost.into_iter().map(|c| c.id).collect();
        assert_eq!(lost, ["Write-true"]);
    }
    use crate::conversation::{AssistantMessage, ToolResult};
    use crate::protocol::{Outcome, RunStats};

    fn msg(m: Message) -> Record {
        Record::Message { message: m }
    }

    fn assistant(text: &str, calls: &[&str]) -> Message {
        Message::Assistant(AssistantMessage {
            text: text.into(),
            tool_calls: calls
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "t".into(),
                    arguments: "{}".into(),
                })
                .collect(),
            ..AssistantMessage::default()
        })
    }

    fn result(id: &str) -> Message {
        Message::Tool(ToolResult {
            tool_call_id: id.into(),
            content: "ok".into(),
            is_error: false,
        })
    }

    fn started(id: &str) -> Record {
        Record::ToolStarted { call_id: id.into() }
    }

    fn terminal() -> Record {
        Record::Terminal {
            outcome: Outcome::Cancelled {
                partial: String::new(),
                stats: RunStats::default(),
            },
        }
    }

    #[test]
    fn a_finished_journal_has_no_active_run() {
        let r = resume(&[
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            msg(Message::user("a")),
            msg(assistant("done", &[])),
            terminal(),
        ]);
        assert_eq!(r.active, None);
        assert_eq!(r.transcript.len(), 2);
    }

    #[test]
    fn a_compacted_run_resumes_from_the_compacted_conversation() {
        let compacted = vec![Message::user("task"), Message::user("summary")];
        let r = resume(&[
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            msg(Message::user("task")),
            msg(assistant("", &["c1"])),
            msg(result("c1")),
            Record::Compacted {
                transcript: compacted.clone(),
                turns: 7,
            },
        ]);
        assert_eq!(r.transcript, compacted);
        let active = r.active.expect("the run goes on");
        assert_eq!(active.next, Next::Request);
        assert_eq!(active.turns, 7, "its turns counted on");
    }

    #[test]
    fn history_before_any_run_is_not_a_run() {
        let r = resume(&[msg(Message::user("old")), msg(assistant("old answer", &[]))]);
        assert_eq!(r.active, None);
        assert_eq!(r.transcript.len(), 2);
    }

    #[test]
    fn a_run_cut_after_tool_results_asks_the_model_again() {
        let r = resume(&[
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            msg(Message::user("a")),
            msg(assistant("", &["1", "2"])),
            msg(result("2")),
            msg(result("1")),
        ]);
        assert_eq!(
            r.active,
            Some(ActiveRun {
                prompts: vec![1],
                turns: 1,
                next: Next::Request,
                background: Vec::new(),
            })
        );
    }

    #[test]
    fn a_run_cut_mid_tools_names_the_unanswered_calls_and_which_had_started() {
        let r = resume(&[
            msg(Message::user("history")),
            msg(assistant("history", &[])),
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            msg(Message::user("b")),
            msg(assistant("", &["1", "2", "3"])),
            started("1"),
            started("2"),
            msg(result("2")),
        ]);
        let Some(ActiveRun {
            turns: 1,
            next: Next::Tools(pending),
            ..
        }) = r.active
        else {
            panic!("{:?}", r.active)
        };
        let summary: Vec<(&str, bool)> = pending
            .iter()
            .map(|p| (p.call.id.as_str(), p.started))
            .collect();
        assert_eq!(summary, [("1", true), ("3", false)]);
    }

    #[test]
    fn a_recorded_final_answer_only_needs_its_terminal() {
        let r = resume(&[
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            msg(Message::user("a")),
            msg(assistant("the answer", &[])),
        ]);
        assert_eq!(
            r.active,
            Some(ActiveRun {
                prompts: vec![1],
                turns: 1,
                next: Next::Finish("the answer".into()),
                background: Vec::new(),
            })
        );
    }

    #[test]
    fn a_marker_torn_from_its_prompt_starts_or_joins_nothing() {
        let started = resume(&[
            msg(Message::user("old")),
            msg(assistant("old answer", &[])),
            Record::RunStarted {
                prompt: 3,
                limits: None,
            },
        ]);
        assert_eq!((started.active, started.transcript.len()), (None, 2));
        let joined = resume(&[
            Record::RunStarted {
                prompt: 4,
                limits: None,
            },
            msg(Message::user("a")),
            msg(assistant("", &["1"])),
            msg(result("1")),
            Record::PromptJoined {
                prompt: 6,
                background: None,
            },
        ]);
        assert_eq!(
            joined.active,
            Some(ActiveRun {
                prompts: vec![4],
                turns: 1,
                next: Next::Request,
                background: Vec::new(),
            })
        );
    }

    #[test]
    fn joined_prompts_belong_to_the_run() {
        let r = resume(&[
            Record::RunStarted {
                prompt: 4,
                limits: None,
            },
            msg(Message::user("a")),
            msg(assistant("", &["1"])),
            msg(result("1")),
            Record::PromptJoined {
                prompt: 6,
                background: None,
            },
            msg(Message::user("also b")),
        ]);
        assert_eq!(r.active.map(|a| a.prompts), Some(vec![4, 6]));
    }

    #[test]
    fn a_result_whose_call_was_lost_is_dropped_and_a_call_whose_result_was_lost_is_answered() {
        // The journal lost the turn that made call 1, and call 2's result.
        let r = resume(&[
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            msg(Message::user("go")),
            msg(result("1")),
            msg(assistant("", &["2", "3"])),
            msg(result("3")),
            msg(assistant("", &["4"])),
            msg(result("4")),
            msg(result("4")),
        ]);
        let lost = Message::Tool(ToolResult::interrupted("2"));
        assert_eq!(
            r.transcript,
            [
                Message::user("go"),
                assistant("", &["2", "3"]),
                result("3"),
                lost,
                assistant("", &["4"]),
                result("4"),
            ]
        );
        assert_eq!(r.active.map(|a| a.next), Some(Next::Request));
    }
}
