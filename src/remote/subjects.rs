//! Where a run's tasks and results go on NATS: the subjects, the streams and
//! the durable consumers workers share. Tasks are per run and per tag
//! (`orchestrate.tasks.<run>.any`, `orchestrate.tasks.<run>.tag.<tag>`), so
//! a lead may be allowed to publish its own run's only; a worker pulls from
//! the consumer of untagged tasks and from one per tag it has. Results are
//! per sub-agent (`orchestrate.results.<run>.<session>`).

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::protocol::SessionId;

/// The work-queue stream of every run's tasks.
pub const TASKS: &str = "ORCHESTRATE_TASKS";

/// Its subjects' prefix.
pub const TASKS_PREFIX: &str = "orchestrate.tasks";

/// The stream of every run's results.
pub const RESULTS: &str = "ORCHESTRATE_RESULTS";

/// Its subjects' prefix.
pub const RESULTS_PREFIX: &str = "orchestrate.results";

/// How long a task or a result is kept at most.
pub const TIME_TO_LIVE: Duration = Duration::from_secs(24 * 3600);

/// Within how long a second message of the same id is dropped.
pub const DUPLICATES_WITHIN: Duration = Duration::from_secs(10 * 60);

/// The subject of `run`'s tasks for workers tagged `tag` (any worker: `None`).
pub fn task(run: SessionId, tag: Option<&str>) -> String {
    match tag {
        None => format!("{TASKS_PREFIX}.{run}.any"),
        Some(tag) => format!("{TASKS_PREFIX}.{run}.tag.{tag}"),
    }
}

/// The subject of the result of `run`'s sub-agent `session`: one per
/// sub-agent, so a worker can tell whether a task it is handed again was
/// answered already.
pub fn result(run: SessionId, session: SessionId) -> String {
    format!("{RESULTS_PREFIX}.{run}.{session}")
}

/// The subjects of every result of `run`.
pub fn results(run: SessionId) -> String {
    format!("{RESULTS_PREFIX}.{run}.*")
}

/// The durable consumer of tasks tagged `tag` (untagged: `None`), and the
/// subjects it takes.
pub fn consumer(tag: Option<&str>) -> (String, String) {
    match tag {
        None => ("tasks-any".into(), format!("{TASKS_PREFIX}.*.any")),
        Some(tag) => (
            format!("tasks-tag-{tag}"),
            format!("{TASKS_PREFIX}.*.tag.{tag}"),
        ),
    }
}

/// Whether `tag` may name a worker's tag: letters, digits, `-` and `_`.
pub fn valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 64
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// How many copies a stream keeps: three, or as many servers as there are.
pub fn replicas(servers: usize) -> usize {
    servers.clamp(1, 3)
}

/// Makes the streams if they are not there; the tasks' stream.
pub(crate) async fn ensure_streams(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<stream::Stream, String> {
    let tasks = js
        .get_or_create_stream(stream::Config {
            name: TASKS.into(),
            subjects: vec![format!("{TASKS_PREFIX}.>")],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            num_replicas: replicas,
            max_age: TIME_TO_LIVE,
            duplicate_window: DUPLICATES_WITHIN,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot make the stream {TASKS}: {e}"))?;
    js.get_or_create_stream(stream::Config {
        name: RESULTS.into(),
        subjects: vec![format!("{RESULTS_PREFIX}.>")],
        storage: stream::StorageType::File,
        num_replicas: replicas,
        max_age: TIME_TO_LIVE,
        duplicate_window: DUPLICATES_WITHIN,
        ..Default::default()
    })
    .await
    .map_err(|e| format!("cannot make the stream {RESULTS}: {e}"))?;
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_subject_is_its_runs_and_falls_under_its_consumer() {
        let run = SessionId::new();
        assert_eq!(task(run, None), format!("orchestrate.tasks.{run}.any"));
        assert_eq!(
            task(run, Some("gpu")),
            format!("orchestrate.tasks.{run}.tag.gpu")
        );
        assert_eq!(consumer(Some("gpu")).1, "orchestrate.tasks.*.tag.gpu");
        assert_eq!(consumer(None).0, "tasks-any");
        // A session id holds no dot: it is one token of a subject.
        assert!(!run.to_string().contains('.'));
        assert!(valid_tag("gpu-a100_2"));
        for bad in ["", "a.b", "a*", "a>", "a b", &"x".repeat(65)] {
            assert!(!valid_tag(bad), "{bad:?}");
        }
        assert_eq!((replicas(1), replicas(2), replicas(5)), (1, 2, 3));
    }
}
