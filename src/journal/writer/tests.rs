//! Tests of the journal writer.

use super::*;
use crate::conversation::Message;
use crate::journal::read_journal;
use crate::protocol::SessionId;

#[test]
fn a_batch_syncs_the_files_asked_for_unless_anyone_asks_for_everything() {
    let asked = |paths: &[Option<&str>]| -> Vec<SyncRequest> {
        paths
            .iter()
            .map(|p| SyncRequest {
                path: p.map(PathBuf::from),
                by: None,
                done: oneshot::channel().0,
            })
            .collect()
    };
    assert_eq!(Scope::of(&[], false), Scope::Nothing);
    assert_eq!(Scope::of(&[], true), Scope::Everything);
    assert_eq!(
        Scope::of(&asked(&[Some("a"), None]), false),
        Scope::Everything
    );
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let asked_for = |names: &[&str]| -> Vec<SyncRequest> {
        let names: Vec<Option<&str>> = names.iter().map(|n| Some(*n)).collect();
        asked(&names)
            .into_iter()
            .map(|r| SyncRequest {
                path: r.path.map(|p| path(p.to_str().unwrap())),
                ..r
            })
            .collect()
    };
    let mut files = OpenFiles::new(16);
    files.append(&path("a"), 1, b"{}\n").unwrap();
    files.append(&path("b"), 1, b"{}\n").unwrap();
    // "c" was not written since its last sync; "b" was not asked for.
    let scope = Scope::of(&asked_for(&["a", "c", "a"]), false);
    assert_eq!(scope.take_due(&mut files), vec![path("a")]);
    assert!(!files.is_dirty(&path("a")) && files.is_dirty(&path("b")));
    assert_eq!(Scope::Everything.take_due(&mut files), vec![path("b")]);
    assert!(Scope::Everything.take_due(&mut files).is_empty());
}

#[test]
fn only_a_request_due_before_the_writers_next_look_wakes_it_and_only_when_it_waits() {
    let now = Instant::now();
    let soon = Some(now + SOON);
    let nearly = Some(now + IDLE_FLUSH / 2);
    assert!(wakes_writer(true, None, now));
    assert!(wakes_writer(true, nearly, now));
    assert!(!wakes_writer(true, soon, now));
    for by in [None, nearly, soon] {
        assert!(!wakes_writer(false, by, now), "a busy writer looks anyway");
    }
}

#[test]
fn a_large_group_is_synced_across_threads_and_only_the_failures_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = OpenFiles::new(1024);
    let mut due: Vec<PathBuf> = (0..40).map(|i| dir.path().join(format!("{i}"))).collect();
    for path in &due {
        files.append(path, 0, b"{}\n").unwrap();
    }
    // Not open: it cannot be synced, and says so.
    let missing = dir.path().join("gone");
    due.insert(17, missing.clone());
    let failed = sync_files(&files, &due);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, missing);
}

#[test]
fn past_the_bound_synced_files_close_first_then_the_oldest_once_synced() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = Writer::new(Arc::default(), 8);
    let paths: Vec<PathBuf> = (0..12).map(|i| dir.path().join(format!("{i}"))).collect();
    for (batch, path) in paths.iter().enumerate() {
        writer.batch = batch as u64;
        writer.write(path, b"{}\n").unwrap();
    }
    // The first two were synced since: they are closed first, then the oldest
    // of those still to be synced, down to three quarters of the bound.
    let synced = Scope::Files(paths[..2].iter().cloned().collect());
    assert_eq!(writer.sync(synced), None);
    writer.close_overflow();
    assert_eq!(writer.files.len(), 6);
    assert!(writer.failed.is_empty());
    for path in &paths[..6] {
        assert!(writer.files.get(path).is_none(), "{} open", path.display());
    }
    for path in &paths[6..] {
        assert!(writer.files.is_dirty(path), "{} not due", path.display());
    }
}

#[tokio::test]
async fn a_file_synced_alone_is_readable_and_a_full_sync_covers_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::start().unwrap();
    let (a, b) = (
        crate::state::StateDir::at(dir.path(), std::path::Path::new("/w"))
            .journal(SessionId::new()),
        crate::state::StateDir::at(dir.path(), std::path::Path::new("/w"))
            .journal(SessionId::new()),
    );
    let record = Record::Message {
        message: Message::user("x"),
    };
    journal.append(&a, &record).unwrap();
    journal.append(&b, &record).unwrap();
    journal.sync_file(&a).await.unwrap();
    assert_eq!(read_journal(&a).unwrap().records, vec![record.clone()]);
    journal.sync().await.unwrap();
    assert_eq!(read_journal(&b).unwrap().records, vec![record]);
}

#[tokio::test]
async fn appended_records_are_readable_after_sync() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::start().unwrap();
    let id = SessionId::new();
    let path = crate::state::StateDir::at(dir.path(), std::path::Path::new("/w")).journal(id);
    for i in 0..100 {
        journal
            .append(
                &path,
                &Record::Message {
                    message: Message::user(i.to_string()),
                },
            )
            .unwrap();
    }
    journal.sync().await.unwrap();
    let records = read_journal(&path).unwrap().records;
    assert_eq!(records.len(), 100);
    assert_eq!(
        records[99],
        Record::Message {
            message: Message::user("99")
        }
    );
}

/// A writer with one record appended to a journal whose folder is a file (the
/// write cannot be made) and one to a journal that can be written.
fn a_failing_and_a_good_journal() -> (tempfile::TempDir, Journal, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::start().unwrap();
    std::fs::write(dir.path().join("blocked"), "").unwrap();
    let bad = dir.path().join("blocked").join("s.jsonl");
    let good = crate::state::StateDir::at(dir.path(), std::path::Path::new("/w"))
        .journal(SessionId::new());
    let record = Record::Message {
        message: Message::user("x"),
    };
    journal.append(&bad, &record).unwrap();
    journal.append(&good, &record).unwrap();
    (dir, journal, bad, good)
}

#[tokio::test]
async fn a_failed_write_reaches_its_own_files_next_sync_and_no_other() {
    let (_dir, journal, bad, good) = a_failing_and_a_good_journal();
    // The same batch: another file's failure is not this one's.
    journal.sync_file(&good).await.unwrap();
    let error = journal.sync_file(&bad).await.unwrap_err();
    assert!(error.contains("blocked"), "{error}");
    // Told once; the file has nothing else pending.
    journal.sync_file(&bad).await.unwrap();
}

/// Fails rather than hangs if a held sync were never served.
async fn served<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .expect("a sync request was never answered")
}

/// A writer, and one record appended to a new journal in a temporary folder.
fn a_journal_with_a_record() -> (tempfile::TempDir, Journal, PathBuf, Record) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::start().unwrap();
    let path = crate::state::StateDir::at(dir.path(), std::path::Path::new("/w"))
        .journal(SessionId::new());
    let record = Record::Message {
        message: Message::user("x"),
    };
    journal.append(&path, &record).unwrap();
    (dir, journal, path, record)
}

#[tokio::test]
async fn a_sync_with_a_window_is_held_until_its_files_next_sync_covers_it() {
    let (_dir, journal, path, _) = a_journal_with_a_record();
    let mut held = journal.sync_file_within(&path, Duration::from_secs(3600));
    // The record reaches the file on its own, within the writer's idle flush.
    served(async {
        while read_journal(&path).map_or(true, |r| r.records.is_empty()) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(!held.succeeded(), "held: not served on its own");
    assert_eq!(served(journal.sync_file(&path)).await, Ok(()));
    assert_eq!(served(held.wait()).await, Ok(()));
}

#[tokio::test]
async fn a_held_sync_is_served_by_its_deadline_or_when_the_writer_closes() {
    let (_dir, journal, path, record) = a_journal_with_a_record();
    let window = Duration::from_millis(150);
    let asked = Instant::now();
    assert_eq!(
        served(journal.sync_file_within(&path, window).wait()).await,
        Ok(())
    );
    assert!(asked.elapsed() >= window, "served before its deadline");
    journal.append(&path, &record).unwrap();
    let held = journal.sync_file_within(&path, Duration::from_secs(3600));
    drop(journal);
    assert_eq!(served(held.wait()).await, Ok(()));
    assert_eq!(
        read_journal(&path).unwrap().records,
        vec![record.clone(), record]
    );
}

#[tokio::test]
async fn every_sync_waiting_on_a_failed_file_hears_its_error() {
    let (_dir, journal, bad, _) = a_failing_and_a_good_journal();
    let mut held = journal.sync_file_within(&bad, Duration::from_secs(3600));
    let now = served(journal.sync_file(&bad)).await;
    assert!(now.unwrap_err().contains("blocked"));
    assert!(!held.succeeded());
    assert!(served(held.wait()).await.unwrap_err().contains("blocked"));
}

#[tokio::test]
async fn a_failure_no_request_heard_is_told_to_the_files_next_sync() {
    let (_dir, journal, bad, good) = a_failing_and_a_good_journal();
    // Due at once and not waited for: its batch is done once a later sync is.
    drop(journal.sync_file_within(&bad, Duration::ZERO));
    served(journal.sync_file(&good)).await.unwrap();
    let error = served(journal.sync_file(&bad)).await.unwrap_err();
    assert!(error.contains("blocked"), "{error}");
}
