//! Where a run's tasks and results go on NATS: the subjects, the streams, the
//! object store and the durable consumers workers share. Tasks are per
//! protocol, lead, run and set of tags
//! (`orchestrate.tasks.v<protocol>.<lead>.<run>.any`, `….tag.<set>`), so a
//! server may let a lead publish under its own key only, and a worker
//! follows only the leads it trusts: per lead, the consumer of untagged
//! tasks and one per set of its tags. Results are per sub-agent
//! (`orchestrate.results.<run>.<session>`).

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

/// The stream of remote sub-agents' journals, one subject each.
pub const JOURNALS: &str = "ORCHESTRATE_JOURNALS";

/// Its subjects' prefix.
pub const JOURNALS_PREFIX: &str = "orchestrate.journals";

/// The key-value bucket of the sub-agents whose result was published, by
/// session id: kept a day, past its run's end, so a task sent again within
/// the day it may live is never run twice.
pub const DONE: &str = "ORCHESTRATE_DONE";

/// The object store of the files a run's lead and workers hand each other
/// (bundles of workspaces, and of work), each named after its run.
pub const FILES: &str = "ORCHESTRATE_FILES";

/// How long a task or a result is kept at most.
pub const TIME_TO_LIVE: Duration = Duration::from_secs(24 * 3600);

/// Within how long a second message of the same id is dropped.
pub const DUPLICATES_WITHIN: Duration = Duration::from_secs(10 * 60);

pub use crate::roles::{MAX_TAGS, valid_tag};

/// The first token of the subjects of hook requests.
pub const HOOKS_PREFIX: &str = "orchestrate.hooks";

/// The first tokens of every task's subject that workers of this protocol
/// follow: `orchestrate.tasks.v<protocol>`.
fn tasks_here() -> String {
    format!("{TASKS_PREFIX}.v{}", super::envelope::PROTOCOL)
}

/// The subject of run `run`'s tasks, sent by the lead whose public key is
/// `lead`, for workers that have every one of `tags` (none: any worker):
/// `orchestrate.tasks.v<protocol>.<lead>.<run>.any` (or `….tag.<set>`). A
/// worker follows the subjects of its protocol and the leads it trusts only,
/// so it is never handed a task it would refuse; a server may let each lead
/// publish under its own key only.
pub fn task(lead: &str, run: SessionId, tags: &[String]) -> String {
    let here = tasks_here();
    match tag_set(tags) {
        None => format!("{here}.{lead}.{run}.any"),
        Some(set) => format!("{here}.{lead}.{run}.tag.{set}"),
    }
}

/// The subjects of every task of run `run` of lead `lead`.
pub fn tasks_of(lead: &str, run: SessionId) -> String {
    format!("{}.{lead}.{run}.>", tasks_here())
}

/// The lead a task's `subject` was sent as, when it is a task subject of
/// this protocol.
pub fn lead_of(subject: &str) -> Option<&str> {
    let rest = subject.strip_prefix(&tasks_here())?.strip_prefix('.')?;
    rest.split('.').next().filter(|lead| !lead.is_empty())
}

/// A set of tags as one subject token: sorted, without repeats, joined by
/// `+` (no tag holds one); `None` for no tag.
fn tag_set(tags: &[String]) -> Option<String> {
    let mut sorted: Vec<&str> = tags.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    (!sorted.is_empty()).then(|| sorted.join("+"))
}

/// The durable consumers a worker tagged `tags` that trusts `leads`
/// follows, each with the subjects it takes: for each lead, its untagged
/// tasks and the tasks of each set of the worker's tags (a task needing
/// `gpu` and `big` goes to a worker that has both).
pub fn consumers(leads: &[String], tags: &[String]) -> Vec<(String, String)> {
    use sha2::Digest;
    let tags = &tags[..tags.len().min(MAX_TAGS)];
    let mut sets: Vec<String> = Vec::new();
    for mask in 1..(1usize << tags.len()) {
        let chosen: Vec<String> = (0..tags.len())
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| tags[i].clone())
            .collect();
        if let Some(set) = tag_set(&chosen)
            && !sets.contains(&set)
        {
            sets.push(set);
        }
    }
    let mut followed: Vec<&String> = Vec::new();
    for lead in leads {
        if !followed.contains(&lead) {
            followed.push(lead);
        }
    }
    let here = tasks_here();
    let version = format!("v{}", super::envelope::PROTOCOL);
    let mut out = Vec::new();
    for lead in followed {
        out.push((
            format!("tasks-{version}-{lead}-any"),
            format!("{here}.{lead}.*.any"),
        ));
        for set in &sets {
            // A consumer's name holds no `+`, and stays short: the set's
            // digest, which no other set shares.
            let digest = sha2::Sha256::digest(set.as_bytes());
            let short: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            out.push((
                format!("tasks-{version}-{lead}-{short}"),
                format!("{here}.{lead}.*.tag.{set}"),
            ));
        }
    }
    out
}

/// Whether a consumer following `filter` takes a message on `subject`
/// (NATS wildcards: `*` one token, `>` the rest).
pub fn follows(filter: &str, subject: &str) -> bool {
    let mut subject = subject.split('.');
    for token in filter.split('.') {
        match (token, subject.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (token, Some(got)) if token == got => {}
            _ => return false,
        }
    }
    subject.next().is_none()
}

/// The subject of the result of sub-agent `session` of run `run` of lead
/// `lead`: one per sub-agent, so a worker can tell whether a task it is
/// handed again was answered already, and under its lead's key, so a server
/// may let a worker answer only the leads it serves.
pub fn result(lead: &str, run: SessionId, session: SessionId) -> String {
    format!("{RESULTS_PREFIX}.{lead}.{run}.{session}")
}

/// The subjects of every result of run `run` of lead `lead`.
pub fn results(lead: &str, run: SessionId) -> String {
    format!("{RESULTS_PREFIX}.{lead}.{run}.*")
}

/// Where lead `lead` says it gave up on sub-agent `session` of its run
/// `run` (its call was cancelled): kept in the results' stream, so a worker
/// that takes the task later sees it too.
pub fn cancel(lead: &str, run: SessionId, session: SessionId) -> String {
    format!("{RESULTS_PREFIX}.{lead}.{run}.{session}.cancel")
}

/// The journal of sub-agent `session` of run `run` of lead `lead`.
pub fn journal(lead: &str, run: SessionId, session: SessionId) -> String {
    format!("{JOURNALS_PREFIX}.{lead}.{run}.{session}")
}

/// The journals of every sub-agent of run `run` of lead `lead`.
pub fn run_journals(lead: &str, run: SessionId) -> String {
    format!("{JOURNALS_PREFIX}.{lead}.{run}.>")
}

/// Where a worker asks lead `lead` to run its run `run`'s hooks for
/// sub-agent `session`: a request and its reply, kept nowhere.
pub fn hooks(lead: &str, run: SessionId, session: SessionId) -> String {
    format!("{HOOKS_PREFIX}.{lead}.{run}.{session}")
}

/// The subjects of every hook request of run `run` of lead `lead`.
pub fn run_hooks(lead: &str, run: SessionId) -> String {
    format!("{HOOKS_PREFIX}.{lead}.{run}.*")
}

/// The sub-agent a hook request's `subject` is for.
pub fn hooks_session(subject: &str) -> Option<SessionId> {
    let (_, session) = subject.rsplit_once('.')?;
    session.parse().ok()
}

/// Every subject of run `run` of lead `lead` in the results' stream:
/// results and cancels.
pub fn run_results(lead: &str, run: SessionId) -> String {
    format!("{RESULTS_PREFIX}.{lead}.{run}.>")
}

/// How many copies a stream keeps: three, or as many servers as there are
/// (those named, or those the server says it is clustered with, whichever
/// is more).
pub fn replicas(servers: usize) -> usize {
    servers.clamp(1, 3)
}

/// Joins `servers` as `name`, proving itself with `auth`,
/// and makes the streams if they are not there: the client, its JetStream
/// and the tasks' stream. Not retried: a server that cannot be reached, or a
/// token it refuses, is said at once; once joined, the client reconnects on
/// its own.
pub(crate) async fn join(
    servers: &[String],
    auth: &super::auth::Auth,
    name: String,
) -> Result<(async_nats::Client, jetstream::Context, stream::Stream), String> {
    let client = auth
        .options()
        .name(name)
        .connect(addresses(servers)?)
        .await
        .map_err(|e| format!("cannot join {}: {e}", servers.join(",")))?;
    let js = jetstream::new(client.clone());
    let clustered = 1 + client.server_info().connect_urls.len();
    let tasks = ensure_streams(&js, replicas(servers.len().max(clustered))).await?;
    Ok((client, js, tasks))
}

/// Whether `server` (`nats://host:port`, or `host:port`) is on this
/// machine: a loopback address or `localhost`.
pub fn on_this_machine(server: &str) -> bool {
    // Read as the client reads it, so that what is checked is where it goes.
    let Ok(address) = server.parse::<async_nats::ServerAddr>() else {
        return false;
    };
    let host = address.host();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The servers a comma-separated `list` names, refused when it names none,
/// or names one not on this machine while nothing proves who joins it
/// (`proved`: a token, an nkey or a client certificate is set).
pub fn servers(list: &str, proved: bool) -> Result<Vec<String>, String> {
    let servers: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if servers.is_empty() {
        return Err("names no server".into());
    }
    if !proved && let Some(away) = servers.iter().find(|s| !on_this_machine(s)) {
        return Err(format!(
            "{away} is not on this machine: set NATS_TOKEN, NATS_NKEY, or NATS_TLS_CERT and NATS_TLS_KEY to join it (a server elsewhere requires authentication)"
        ));
    }
    Ok(servers)
}

/// The servers' addresses, each read: one that does not read is named.
pub fn addresses(servers: &[String]) -> Result<Vec<async_nats::ServerAddr>, String> {
    servers
        .iter()
        .map(|s| {
            s.parse::<async_nats::ServerAddr>()
                .map_err(|e| format!("{s:?} is not a NATS server address ({e})"))
        })
        .collect()
}

/// How long a client keeps trying to make the streams while a cluster elects
/// its leaders.
const ELECTION: Duration = Duration::from_secs(30);

/// Whether `error` (as the client says it) will not pass by trying again:
/// a permission refused, or a JetStream error that says the request is
/// wrong whoever leads (a stream or consumer of that name made otherwise,
/// subjects overlapping another stream's, a bad configuration, JetStream
/// off, a limit or a message size exceeded). What a cluster says while it
/// elects its leaders (no leader, not enough peers yet, no answer) passes.
pub(crate) fn lasting(error: &str) -> bool {
    const LASTING: [u32; 15] = [
        10002, 10003, 10013, 10025, 10026, 10027, 10028, 10039, 10047, 10052, 10054, 10058, 10065,
        10076, 10148,
    ];
    let lower = error.to_ascii_lowercase();
    if lower.contains("permissions violation") || lower.contains("authorization violation") {
        return true;
    }
    lower.split("error code ").skip(1).any(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits
            .parse()
            .is_ok_and(|code: u32| LASTING.contains(&code))
    })
}

/// What `attempt` gives, tried again while it fails for [`ELECTION`] (a
/// cluster that has no leader yet refuses what it will do once it has one);
/// at once for an error that will not pass ([`lasting`]); its last error
/// past that.
pub(crate) async fn patiently<T, F, Fut>(mut attempt: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + ELECTION;
    loop {
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(e) if !lasting(&e) && tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "not yet");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Makes the streams if they are not there; the tasks' stream.
pub(crate) async fn ensure_streams(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<stream::Stream, String> {
    patiently(|| make_streams(js, replicas)).await
}

async fn make_streams(js: &jetstream::Context, replicas: usize) -> Result<stream::Stream, String> {
    let config = |name: &str, prefix: &str, retention| stream::Config {
        name: name.into(),
        subjects: vec![format!("{prefix}.>")],
        retention,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        max_age: TIME_TO_LIVE,
        duplicate_window: DUPLICATES_WITHIN,
        ..Default::default()
    };
    let make = |config: stream::Config| async move {
        let name = config.name.clone();
        (js.get_or_create_stream(config).await)
            .map_err(|e| format!("cannot make the stream {name}: {e}"))
    };
    let tasks = make(config(
        TASKS,
        TASKS_PREFIX,
        stream::RetentionPolicy::WorkQueue,
    ))
    .await?;
    make(config(
        RESULTS,
        RESULTS_PREFIX,
        stream::RetentionPolicy::Limits,
    ))
    .await?;
    make(config(
        JOURNALS,
        JOURNALS_PREFIX,
        stream::RetentionPolicy::Limits,
    ))
    .await?;
    let done = jetstream::kv::Config {
        bucket: DONE.into(),
        history: 1,
        max_age: TIME_TO_LIVE,
        storage: stream::StorageType::File,
        num_replicas: replicas,
        ..Default::default()
    };
    if js.get_key_value(DONE).await.is_err() {
        (js.create_key_value(done).await)
            .map_err(|e| format!("cannot make the bucket {DONE}: {e}"))?;
    }
    if js.get_object_store(FILES).await.is_err() {
        let files = jetstream::object_store::Config {
            bucket: FILES.into(),
            description: Some("orchestrate: workspaces and work, as git bundles".into()),
            max_age: TIME_TO_LIVE,
            storage: stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        };
        (js.create_object_store(files).await)
            .map_err(|e| format!("cannot make the store {FILES}: {e}"))?;
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_servers_are_on_this_machine() {
        for here in [
            "nats://127.0.0.1:4222",
            "127.0.0.2:4222",
            "nats://localhost:4222",
            "nats://[::1]:4222",
            "nats://user:pw@127.0.0.1:4222",
        ] {
            assert!(on_this_machine(here), "{here}");
        }
        for away in [
            "nats://10.0.0.1:4222",
            "nats://nats.example.com",
            "nats://127.0.0.1.example.com:4222",
            "nats://evil.example.com#@127.0.0.1",
        ] {
            assert!(!on_this_machine(away), "{away}");
        }
    }

    #[test]
    fn what_a_cluster_says_while_it_elects_is_tried_again_and_a_wrong_request_is_not() {
        for passes in [
            "cannot make the stream ORCHESTRATE_TASKS: jetstream error: JetStream cluster not available (code 503, error code 10008)",
            "jetstream error: insufficient resources (code 503, error code 10023)",
            "cannot place the task: timed out: didn't receive any response",
            "no responders",
        ] {
            assert!(!lasting(passes), "{passes}");
        }
        for lasts in [
            "jetstream error: stream name already in use with a different configuration (code 400, error code 10058)",
            "jetstream error: subjects overlap with an existing stream (code 400, error code 10065)",
            "nats: Permissions Violation for Publish to \"orchestrate.tasks.v1.U.x.any\"",
        ] {
            assert!(lasting(lasts), "{lasts}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_wrong_request_is_said_at_once_and_an_election_waited_out() {
        let tries = std::sync::atomic::AtomicUsize::new(0);
        let wrong = patiently(|| async {
            tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>("jetstream error: x (code 400, error code 10058)".to_owned())
        })
        .await;
        assert!(wrong.is_err());
        assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), 1);
        tries.store(0, std::sync::atomic::Ordering::SeqCst);
        let elected = patiently(|| async {
            match tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0..3 => Err("jetstream error: no leader (code 503, error code 10008)".to_owned()),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(elected, Ok(7));
        assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    #[test]
    fn servers_elsewhere_need_a_token() {
        let here = servers(" nats://127.0.0.1:4222, nats://localhost:4223 ,", false).unwrap();
        assert_eq!(here, ["nats://127.0.0.1:4222", "nats://localhost:4223"]);
        assert_eq!(servers(" , ", false).unwrap_err(), "names no server");
        let away = servers("nats://127.0.0.1:1,nats://nats.example.com:4222", false);
        assert!(
            away.unwrap_err()
                .starts_with("nats://nats.example.com:4222 is not on this machine")
        );
        assert!(servers("nats://nats.example.com:4222", true).is_ok());
    }

    #[test]
    fn a_tasks_subject_is_its_leads_and_runs_and_falls_under_its_consumer() {
        let run = SessionId::new();
        let lead = "ULEAD";
        let v = super::super::envelope::PROTOCOL;
        assert_eq!(
            task(lead, run, &[]),
            format!("orchestrate.tasks.v{v}.ULEAD.{run}.any")
        );
        assert_eq!(lead_of(&task(lead, run, &[])), Some("ULEAD"));
        assert_eq!(
            lead_of(&format!("orchestrate.tasks.v{}.ULEAD.x.any", v + 1)),
            None
        );
        assert_eq!(lead_of("orchestrate.results.x"), None);
        let tags = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let big_gpu = task(lead, run, &tags(&["gpu", "big", "gpu"]));
        assert_eq!(
            big_gpu,
            format!("orchestrate.tasks.v{v}.ULEAD.{run}.tag.big+gpu")
        );
        assert!(follows(&tasks_of(lead, run), &big_gpu));
        assert!(!follows(&tasks_of("UOTHER", run), &big_gpu));
        // A worker with both tags follows the task's set; one with one not.
        let both = consumers(&tags(&["ULEAD", "ULEAD"]), &tags(&["gpu", "big"]));
        let filters: Vec<&str> = both.iter().map(|(_, f)| f.as_str()).collect();
        let p = format!("orchestrate.tasks.v{v}.ULEAD.*");
        assert_eq!(
            filters,
            [
                format!("{p}.any"),
                format!("{p}.tag.gpu"),
                format!("{p}.tag.big"),
                format!("{p}.tag.big+gpu")
            ]
        );
        assert!(follows(&both[3].1, &big_gpu));
        assert!(!follows(&both[1].1, &big_gpu));
        assert!(!follows(&both[0].1, &big_gpu));
        assert!(both[3].0.starts_with(&format!("tasks-v{v}-ULEAD-")));
        // `x_and_y` and the pair `x`, `y` are two sets, two consumers.
        let pair = consumers(&tags(&["L"]), &tags(&["x", "y"]));
        let one_tag = consumers(&tags(&["L"]), &tags(&["x_and_y"]));
        assert_ne!(pair[3].0, one_tag[1].0);
        let one = consumers(&tags(&["L"]), &tags(&["gpu"]));
        assert!(!one.iter().any(|(_, f)| f.ends_with("big+gpu")));
        assert_eq!(consumers(&tags(&["L"]), &[]).len(), 1);
        // Each lead it trusts is followed apart: another's tasks never come.
        let two = consumers(&tags(&["L1", "L2"]), &[]);
        assert_eq!(two.len(), 2);
        assert!(!follows(&two[0].1, &task("L2", run, &[])));
        assert!(follows(&two[1].1, &task("L2", run, &[])));
        assert!(follows("a.>", "a.b.c") && !follows("a.>", "a") && !follows("a.*", "a.b.c"));
        // A session id holds no dot: it is one token of a subject.
        assert!(!run.to_string().contains('.'));
        assert!(valid_tag("gpu-a100_2"));
        for bad in ["", "a.b", "a*", "a>", "a b", &"x".repeat(65)] {
            assert!(!valid_tag(bad), "{bad:?}");
        }
        assert_eq!((replicas(1), replicas(2), replicas(5)), (1, 2, 3));
    }
}
