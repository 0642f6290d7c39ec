//! The runs' index: what each journal says about its session (its run, parent,
//! role, how its last run ended, its tokens and cost, its task's first line),
//! kept per run in `index/<run>.json` beside the journals, with each journal's
//! length, modification time and inode when it was read. A listing reads a
//! journal only when the index has nothing for it or its file has changed
//! since; an index that is missing, damaged or of another format is rebuilt
//! from the journals. It is a cache: nothing is lost when it goes.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Agent, RunStatus, status_of};
use crate::journal::{Damaged, JournalError, Record, read_journal};
use crate::protocol::SessionId;
use crate::state::StateDir;

/// What a listing needs of one session, as its journal told it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Entry {
    /// The session.
    pub session: SessionId,
    /// Its journal's name in the journals' folder.
    pub file: String,
    /// Its journal's file when it was read.
    pub stamp: Stamp,
    /// Its parent, for sub-agents.
    pub parent: Option<SessionId>,
    /// Its run, as its header names it.
    pub run: Option<SessionId>,
    /// Its role.
    pub role: String,
    /// How its last run ended; `None` while one is unfinished.
    pub ended: Option<RunStatus>,
    /// Tokens its own model turns used.
    pub tokens: u64,
    /// What they cost in USD; `None` when a price was unknown.
    pub cost: Option<f64>,
    /// The first line of its first prompt, clipped.
    pub task_line: String,
    /// The title its first prompt got, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its journal's damaged lines.
    pub damaged: Vec<Damaged>,
}

impl Entry {
    fn of(file: String, stamp: Stamp, summary: Summarized) -> Self {
        let Summarized {
            agent,
            run,
            damaged,
        } = summary;
        let line = agent.task.lines().next().unwrap_or_default();
        Self {
            session: agent.session,
            file,
            stamp,
            parent: agent.parent,
            run,
            role: agent.role.clone(),
            ended: agent.outcome.as_ref().map(|o| status_of(Some(o))),
            tokens: agent.tokens,
            cost: agent.cost,
            task_line: clip(line, TASK_LINE).to_owned(),
            title: agent.title.clone(),
            damaged,
        }
    }
}

/// The longest task line kept, in bytes: more than a listing shows.
const TASK_LINE: usize = 240;

fn clip(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Which file a journal was: when one of these differs, it has changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stamp {
    len: u64,
    modified_ns: i128,
    inode: u64,
}

impl Stamp {
    /// The stamp of a regular file; `None` for anything else (which a read
    /// refuses, and which is never taken from the index).
    fn of(meta: &std::fs::Metadata) -> Option<Self> {
        meta.file_type().is_file().then(|| Self {
            len: meta.len(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            inode: meta.ino(),
        })
    }
}

/// One run's index file.
#[derive(Serialize, Deserialize)]
struct File {
    format: u32,
    journals: Vec<Entry>,
}

/// The index files' format: a file of another is rebuilt.
const FORMAT: u32 = 1;

/// The largest index file read: far above a run of ten thousand sessions.
const MAX_FILE: u64 = 256 * 1024 * 1024;

/// Every session of the workspace, and the journals that could not be read.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    /// One entry a journal, up to date.
    pub entries: Vec<Entry>,
    /// The journals left out, each with why.
    pub unreadable: Vec<JournalError>,
}

/// Every journal of the workspace summed up: from the index where its file is
/// as it was, else read (and the index brought up to date).
pub(super) fn sessions(state: &StateDir) -> Sessions {
    let folder = state.dir().join("index");
    let indexed = read_index(&folder);
    let mut found = Sessions::default();
    let Ok(journals) = std::fs::read_dir(state.sessions()) else {
        return found;
    };
    for entry in journals.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let stamp = entry.metadata().ok().as_ref().and_then(Stamp::of);
        let known = (path.file_stem().and_then(|s| s.to_str()))
            .and_then(|stem| stem.parse::<SessionId>().ok())
            .and_then(|id| indexed.entries.get(&id))
            .filter(|known| Some(known.stamp) == stamp);
        match known {
            // Its name is the folder's, whatever the index says.
            Some(known) => found.entries.push(Entry {
                file: entry.file_name().to_string_lossy().into_owned(),
                ..known.clone()
            }),
            None => match (stamp, summarize(&path)) {
                (Some(stamp), Ok(Some(summary))) => {
                    let file = entry.file_name().to_string_lossy().into_owned();
                    found.entries.push(Entry::of(file, stamp, summary));
                }
                (_, Ok(_)) => {}
                (_, Err(e)) => found.unreadable.push(e),
            },
        }
    }
    write_index(&folder, &indexed, &found.entries);
    found
}

/// What a journal says about its session.
struct Summarized {
    agent: Agent,
    /// Its run, as its header names it.
    run: Option<SessionId>,
    damaged: Vec<Damaged>,
}

/// What the journal at `path` says about its session; `None` for a journal
/// with nothing written whole (a session that never started).
fn summarize(path: &Path) -> Result<Option<Summarized>, JournalError> {
    let read = read_journal(path)?;
    match read.records.first() {
        Some(Record::Header { session, run, .. }) => Ok(Some(Summarized {
            agent: super::agent(*session, &read.records),
            run: *run,
            damaged: read.damaged,
        })),
        None if read.damaged.is_empty() => Ok(None),
        _ => Err(JournalError::Headless {
            path: path.to_owned(),
        }),
    }
}

/// The run a session is filed under: its header's, or for journals written
/// before runs were named, its root ancestor's.
pub(super) fn run_of(entry: &Entry, parents: &HashMap<SessionId, Option<SessionId>>) -> SessionId {
    entry
        .run
        .unwrap_or_else(|| super::root(entry.session, parents))
}

/// What the index files held.
#[derive(Default)]
struct Indexed {
    /// Each session's entry.
    entries: HashMap<SessionId, Entry>,
    /// Each file's run and the sessions it held.
    files: HashMap<SessionId, HashSet<SessionId>>,
}

fn read_index(folder: &Path) -> Indexed {
    let mut indexed = Indexed::default();
    let Ok(files) = std::fs::read_dir(folder) else {
        return indexed;
    };
    for file in files.flatten() {
        let path = file.path();
        let Some(run) = index_run(&path) else {
            forget_if_abandoned(&file);
            continue;
        };
        let Ok(bytes) = crate::small_file::read(&path, MAX_FILE) else {
            continue;
        };
        let Ok(read) = serde_json::from_slice::<File>(&bytes) else {
            continue;
        };
        if read.format != FORMAT {
            continue;
        }
        let held = indexed.files.entry(run).or_default();
        for entry in read.journals {
            held.insert(entry.session);
            indexed.entries.insert(entry.session, entry);
        }
    }
    indexed
}

/// How long a fresh index file may wait to be renamed into place before it
/// counts as left by a process that died mid-write.
const ABANDONED: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes a fresh index file (`.<run>.…`) a process that died left behind.
fn forget_if_abandoned(file: &std::fs::DirEntry) {
    let fresh = file
        .file_name()
        .to_str()
        .is_some_and(|n| n.starts_with('.'));
    let old = (file.metadata().ok())
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > ABANDONED);
    if fresh && old {
        let _ = std::fs::remove_file(file.path());
    }
}

/// The run an index file is named for.
fn index_run(path: &Path) -> Option<SessionId> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".json")?.parse().ok()
}

/// Writes the index file of each run whose entries are not what its file held,
/// and removes the files of runs with no journal left. A failure leaves the
/// index as it was (the next listing reads those journals again).
fn write_index(folder: &Path, indexed: &Indexed, entries: &[Entry]) {
    let parents: HashMap<SessionId, Option<SessionId>> =
        entries.iter().map(|e| (e.session, e.parent)).collect();
    let mut by_run: HashMap<SessionId, Vec<&Entry>> = HashMap::new();
    for entry in entries {
        by_run
            .entry(run_of(entry, &parents))
            .or_default()
            .push(entry);
    }
    for run in indexed.files.keys() {
        if !by_run.contains_key(run) {
            let _ = std::fs::remove_file(index_path(folder, *run));
        }
    }
    for (run, mut journals) in by_run {
        let unchanged = indexed.files.get(&run).is_some_and(|held| {
            held.len() == journals.len()
                && journals.iter().all(|e| {
                    held.contains(&e.session) && indexed.entries.get(&e.session) == Some(*e)
                })
        });
        if unchanged {
            continue;
        }
        journals.sort_by_key(|e| e.session);
        let file = FileRef {
            format: FORMAT,
            journals,
        };
        if let Err(e) = write_file(folder, run, &file) {
            tracing::debug!(error = %e, %run, "cannot update the runs' index");
        }
    }
}

/// A [`File`] serialized from the entries where they are.
#[derive(Serialize)]
struct FileRef<'a> {
    format: u32,
    journals: Vec<&'a Entry>,
}

fn index_path(folder: &Path, run: SessionId) -> PathBuf {
    folder.join(format!("{run}.json"))
}

/// Writes `file` as run `run`'s index: to a fresh file of this user's only
/// (mode 0600), then renamed over the old one, so a reader sees one or the
/// other whole.
fn write_file(folder: &Path, run: SessionId, file: &FileRef<'_>) -> std::io::Result<()> {
    crate::state::make_private_dir(folder, false).map_err(std::io::Error::other)?;
    let bytes = serde_json::to_vec(file).map_err(std::io::Error::other)?;
    crate::small_file::replace_whole(folder, &index_path(folder, run), &bytes)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::conversation::{Message, Usage};
    use crate::protocol::{Event, EventKind, Outcome};
    use crate::runs::{read, summaries};

    /// Writes the journal of `session` (of run `run`, under `parent`): a run
    /// asked `task`, a turn of `tokens` tokens, and an end when `answer` is given.
    fn journal(
        state: &StateDir,
        session: SessionId,
        run: SessionId,
        parent: Option<SessionId>,
        task: &str,
        tokens: u64,
        answer: Option<&str>,
    ) {
        let mut records = vec![
            Record::Header {
                session,
                agent: if parent.is_some() { "worker" } else { "lead" }.into(),
                model: "m".into(),
                parent,
                tool_call_id: parent.map(|_| "t1".into()),
                run: Some(run),
                format: crate::journal::FORMAT,
                checkout: None,
                remote: false,
            },
            Record::RunStarted {
                prompt: 1,
                limits: None,
            },
            Record::Message {
                message: Message::user(task),
            },
            Record::Event {
                event: Event {
                    seq: 0,
                    session,
                    parent,
                    agent: "a".into(),
                    kind: EventKind::TurnFinished {
                        turn: 1,
                        text: String::new(),
                        tool_calls: 0,
                        usage: Usage {
                            input_tokens: tokens,
                            ..Usage::default()
                        },
                        cost_usd: Some(0.5),
                    },
                },
                at: None,
                elided: None,
            },
        ];
        if let Some(answer) = answer {
            records.push(Record::Terminal {
                outcome: Outcome::Completed {
                    text: answer.into(),
                    truncated: false,
                    stats: Default::default(),
                },
            });
        }
        let mut text = String::new();
        for record in records {
            text.push_str(&serde_json::to_string(&record).unwrap());
            text.push('\n');
        }
        std::fs::create_dir_all(state.sessions()).unwrap();
        std::fs::write(state.journal(session), text).unwrap();
    }

    /// Two runs: one finished with two workers, one interrupted on its own.
    fn two_runs(root: &Path) -> (StateDir, SessionId, SessionId) {
        let state = StateDir::at(root, Path::new("/w"));
        let first = SessionId::new();
        journal(
            &state,
            first,
            first,
            None,
            "first task\nmore",
            10,
            Some("ok"),
        );
        for _ in 0..2 {
            let worker = SessionId::new();
            journal(&state, worker, first, Some(first), "part", 5, Some("done"));
        }
        let second = SessionId::new();
        journal(&state, second, second, None, "second task", 7, None);
        (state, first, second)
    }

    /// What a listing shows of each run, from `summaries`.
    fn shown(state: &StateDir) -> Vec<(SessionId, RunStatus, usize, u64, String)> {
        (summaries(state).runs.into_iter())
            .map(|r| (r.id, r.status, r.agents, r.tokens, r.task_line))
            .collect()
    }

    #[test]
    fn the_index_lists_what_reading_every_journal_tells() {
        let dir = tempfile::tempdir().unwrap();
        let (state, first, second) = two_runs(dir.path());
        let whole: Vec<_> = (read(&state).runs.into_iter())
            .map(|r| {
                let line = r.task_line().to_owned();
                (r.id, r.status, r.agents.len(), r.tokens(), line)
            })
            .collect();
        assert_eq!(
            whole,
            [
                (second, RunStatus::Interrupted, 1, 7, "second task".into()),
                (first, RunStatus::Finished, 3, 20, "first task".into()),
            ]
        );
        // Built, then read back from the index.
        assert_eq!(shown(&state), whole);
        assert!(state.dir().join(format!("index/{first}.json")).is_file());
        assert_eq!(shown(&state), whole);
        let cost = summaries(&state).runs[1].cost;
        assert_eq!(cost, Some(1.5));
    }

    /// Rewrites run `run`'s index with every session's tokens set to `tokens`.
    fn forge_tokens(state: &StateDir, run: SessionId, tokens: u64) {
        let path = state.dir().join(format!("index/{run}.json"));
        let mut file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for entry in file["journals"].as_array_mut().unwrap() {
            entry["tokens"] = tokens.into();
        }
        std::fs::write(&path, file.to_string()).unwrap();
    }

    #[test]
    fn a_journal_is_read_again_only_when_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        let (state, first, second) = two_runs(dir.path());
        shown(&state);
        // What the index says is what is listed: the journals were not read.
        forge_tokens(&state, first, 1000);
        assert_eq!(shown(&state)[1].3, 3000);
        // A journal that grew is read again; the others still come from the index.
        let lead = state.journal(first);
        let mut text = std::fs::read_to_string(&lead).unwrap();
        text.push_str(&format!(
            "{}\n",
            serde_json::to_string(&Record::PromptJoined {
                prompt: 2,
                background: None,
            })
            .unwrap()
        ));
        std::fs::write(&lead, text).unwrap();
        assert_eq!(shown(&state)[1].3, 10 + 2000);
        // A journal gone takes its run with it, and the run's index file.
        std::fs::remove_file(state.journal(second)).unwrap();
        assert_eq!(shown(&state).len(), 1);
        assert!(!state.dir().join(format!("index/{second}.json")).exists());
    }

    #[test]
    fn a_damaged_or_foreign_index_is_rebuilt_from_the_journals() {
        let dir = tempfile::tempdir().unwrap();
        let (state, first, _) = two_runs(dir.path());
        let whole = shown(&state);
        let path = state.dir().join(format!("index/{first}.json"));
        for bad in [
            b"{\"format\":1,\"journals\":[{\"sess".as_slice(),
            b"{\"format\":99,\"journals\":[]}",
            b"\xff\xfe",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(shown(&state), whole);
            assert_ne!(std::fs::read(&path).unwrap(), bad);
        }
        // An index that is a link is not followed: rebuilt in its place.
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, "kept").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(shown(&state), whole);
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "kept");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }

    #[test]
    fn a_fresh_index_file_left_by_a_dead_process_is_removed_and_a_new_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (state, _, _) = two_runs(dir.path());
        shown(&state);
        let folder = state.dir().join("index");
        let (left, writing) = (folder.join(".run.1.a"), folder.join(".run.2.b"));
        for path in [&left, &writing] {
            std::fs::write(path, "half").unwrap();
        }
        let long_ago = std::time::SystemTime::now() - 2 * ABANDONED;
        std::fs::File::options()
            .write(true)
            .open(&left)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        shown(&state);
        assert!(!left.exists() && writing.exists());
    }

    #[test]
    fn a_run_whose_journal_cannot_be_read_is_named_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let (state, _, second) = two_runs(dir.path());
        let journal = state.journal(second);
        let text = std::fs::read_to_string(&journal).unwrap();
        let newer = format!("\"format\":{}", crate::journal::FORMAT + 1);
        let text = text.replacen(&format!("\"format\":{}", crate::journal::FORMAT), &newer, 1);
        std::fs::write(&journal, text).unwrap();
        let prefix = second.to_string()[..30].to_owned();
        let err = crate::runs::find(&state, Some(&prefix))
            .unwrap_err()
            .to_string();
        assert!(err.contains("written by a newer orchestrate"), "{err}");
    }

    #[test]
    fn a_run_is_found_by_a_prefix_of_its_id_through_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let (state, first, second) = two_runs(dir.path());
        let newest = crate::runs::find(&state, None).unwrap();
        assert_eq!(newest.id, second);
        let prefix = first.to_string()[..30].to_owned();
        let found = crate::runs::find(&state, Some(&prefix)).unwrap();
        assert_eq!((found.id, found.agents.len()), (first, 3));
        assert_eq!(found, read(&state).runs[1]);
    }
}
