//! `orchestrate worker --join URLS`: runs the sub-agent tasks of runs on
//! other machines ([`crate::remote::worker`]), each as the same session code
//! runs a local sub-agent, with this machine's provider flags and keys (keys
//! never travel) in a scratch workspace of its own. SIGTERM or Ctrl-C stops
//! it: it takes no more tasks, and waits `--drain` for those it runs.

use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::process::ExitCode;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::exit;
use super::flags::{Cli, Command};
use super::setup;
use crate::remote::envelope::RemoteTask;
use crate::remote::worker::{Link, Ran, Runner, WorkerConfig};
use crate::remote::workspace::Cache;
use crate::roles::Placement;
use crate::runtime::Handle;
use crate::session::SessionSpec;
use crate::task::{Check, Delegation, Launcher};
use crate::tools::permissions::DenyAll;
use tokio_util::sync::CancellationToken;

/// Runs a worker until it is stopped; its lines go to `err`.
pub(super) async fn run(
    mut cli: Cli,
    env: &impl Fn(&str) -> Option<String>,
    err: &mut dyn Write,
) -> ExitCode {
    let Some(Command::Worker {
        join,
        slots,
        tags,
        trust_lead,
        max_permission_mode,
        drain,
        #[cfg(feature = "test-support")]
        ack_wait_ms,
    }) = cli.command.take()
    else {
        return ExitCode::from(exit::USAGE);
    };
    let usage = |err: &mut dyn Write, why: String| {
        let _ = writeln!(err, "orchestrate: worker: {why}");
        ExitCode::from(exit::USAGE)
    };
    let auth = match crate::remote::auth::Auth::from_env(env) {
        Ok(auth) => auth,
        Err(why) => return usage(err, why),
    };
    let servers = match crate::remote::subjects::servers(&join, auth.proves()) {
        Ok(servers) => servers,
        Err(why) => return usage(err, format!("--join {why}")),
    };
    if tags.len() > crate::remote::subjects::MAX_TAGS {
        let most = crate::remote::subjects::MAX_TAGS;
        return usage(
            err,
            format!("at most {most} --tag (a consumer follows each set of them)"),
        );
    }
    if let Some(bad) = tags.iter().find(|t| !crate::remote::subjects::valid_tag(t)) {
        return usage(
            err,
            format!("--tag {bad:?}: a tag is letters, digits, - and _ (at most 64)"),
        );
    }
    if let Some(bad) = trust_lead
        .iter()
        .find(|k| nkeys::KeyPair::from_public_key(k).is_err())
    {
        return usage(err, format!("--trust-lead {bad:?} is not a public key"));
    }
    // A scratch workspace of its own: the tasks' tools work there.
    let scratch = std::env::temp_dir().join(format!(
        "orchestrate-worker-{}",
        uuid::Uuid::new_v4().simple()
    ));
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&scratch)
    {
        return usage(err, format!("{}: {e}", scratch.display()));
    }
    cli.workspace = Some(scratch.clone());
    let code = serve(
        &cli,
        env,
        err,
        Serve {
            servers,
            slots: slots as usize,
            tags,
            trust_lead,
            max_permission_mode,
            drain,
            auth,
            #[cfg(feature = "test-support")]
            ack_wait: std::time::Duration::from_millis(ack_wait_ms),
            #[cfg(not(feature = "test-support"))]
            ack_wait: crate::remote::worker::ACK_WAIT,
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&scratch);
    code
}

/// A worker's flags, read.
struct Serve {
    servers: Vec<String>,
    slots: usize,
    tags: Vec<String>,
    trust_lead: Vec<String>,
    max_permission_mode: crate::tools::permissions::PermissionMode,
    drain: std::time::Duration,
    auth: crate::remote::auth::Auth,
    ack_wait: std::time::Duration,
}

async fn serve(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    err: &mut dyn Write,
    flags: Serve,
) -> ExitCode {
    let (config, plan) = match setup::prepare(cli, env, Arc::new(DenyAll)).await {
        Ok(prepared) => prepared,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: worker: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let mut trusted = flags.trust_lead;
    if let Some(bad) =
        (plan.trust_leads.iter()).find(|k| nkeys::KeyPair::from_public_key(k).is_err())
    {
        let _ = writeln!(
            err,
            "orchestrate: worker: trust_leads: {bad:?} is not a public key"
        );
        return ExitCode::from(exit::USAGE);
    }
    trusted.extend(plan.trust_leads.iter().cloned());
    // The same user's lead on this machine needs no flag: its key is made
    // now if no run has made it yet, so a lead started later signs with it.
    match crate::remote::lead_key(plan.state.root()) {
        Ok(key) => trusted.push(key.public_key()),
        Err(e) => {
            let _ = writeln!(
                err,
                "orchestrate: worker: warning: this machine's lead key: {e}"
            );
        }
    }
    let runtime = match crate::runtime::Runtime::start(config).await {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: worker: cannot start the runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    let runner = Arc::new(Local {
        handle: runtime.handle(),
        cache: Cache::new(plan.workspace.join(".bundles.git")),
        scratch: plan.workspace.clone(),
        plan: Arc::new(plan),
        max_turns: cli.max_turns,
    });
    let worker = WorkerConfig {
        servers: flags.servers,
        slots: flags.slots,
        tags: flags.tags,
        trusted,
        max_mode: flags.max_permission_mode,
        drain: flags.drain,
        name: worker_name(),
        auth: flags.auth,
        ack_wait: flags.ack_wait,
    };
    // The first SIGTERM or Ctrl-C drains; a second hands back at once.
    let stopping = crate::remote::worker::Stopping::default();
    let told = stopping.clone();
    let signals = tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        for token in [&told.stop, &told.now] {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            token.cancel();
        }
    });
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let say: crate::remote::worker::Say = Arc::new(move |line| {
        let _ = tx.send(line);
    });
    let work = crate::remote::worker::work(worker, runner, stopping, say);
    tokio::pin!(work);
    let worked = loop {
        tokio::select! {
            worked = &mut work => break worked,
            Some(line) = lines.recv() => {
                let _ = writeln!(err, "orchestrate: worker: {line}");
            }
        }
    };
    while let Ok(line) = lines.try_recv() {
        let _ = writeln!(err, "orchestrate: worker: {line}");
    }
    signals.abort();
    runtime.shutdown().await;
    match worked {
        Ok(()) => ExitCode::from(exit::DONE),
        Err(why) => {
            let _ = writeln!(err, "orchestrate: worker: {why}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// This worker's name: the machine's and the process's.
fn worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = match host.trim() {
        "" => "worker",
        name => name,
    }
    .to_owned();
    format!("{host}:{}", std::process::id())
}

/// Runs tasks in this process's runtime, as local sub-agents run.
struct Local {
    handle: Handle,
    /// The bundles of the workspaces it was sent.
    cache: Cache,
    /// The worker's scratch workspace: each task's folder is made in it.
    scratch: std::path::PathBuf,
    plan: Arc<crate::setup::Setup>,
    max_turns: u32,
}

impl Runner for Local {
    fn run(&self, task: RemoteTask, link: Link) -> BoxFuture<'_, Ran> {
        Box::pin(async move {
            let store = link.store;
            // A folder of its own, the worker's user's alone, gone when it ends.
            let folder = self.scratch.join(task.session.to_string());
            let made = std::fs::DirBuilder::new().mode(0o700).create(&folder);
            if let Err(e) = made {
                return Ran::said("failed", format!("{}: {e}", folder.display()));
            }
            let _gone = Gone(folder.clone());
            // Its parent's tree, checked out as a private checkout is.
            let indexes = self.scratch.join(".scratch");
            let tree = task.tree(&store, &indexes, &folder);
            let workdir = match &tree {
                Some(tree) => {
                    let out = self.cache.check_out(tree).await;
                    match out {
                        Ok(workdir) => workdir,
                        Err(why) => {
                            let why = format!("its workspace could not be checked out: {why}");
                            return Ran::said("failed (workspace)", why);
                        }
                    }
                }
                None => folder.clone(),
            };
            let spec = match self.spec(&task, &folder, &workdir, link.hooks) {
                Ok(spec) => spec,
                Err(why) => return Ran::said("failed", why),
            };
            let check = match &task.check {
                Some(check) => match self.plan.tools.get("Bash") {
                    Some(bash) => Some(Check {
                        command: check.command.clone(),
                        attempts: check.attempts.clamp(1, 100),
                        bash,
                    }),
                    None => {
                        return Ran::said(
                            "failed (check)",
                            "its check needs the Bash tool, which this worker does not have",
                        );
                    }
                },
                None => None,
            };
            // Its journal goes to the run's stream as it is written; what a
            // worker that ran it before wrote is taken up when it can be.
            let (resumed, _mirrored) = match self.take_up(task.session, link.journal).await {
                Ok(taken) => taken,
                Err(why) => return Ran::said("failed (journal)", why),
            };
            // Run as a local Task call's sub-agent is, its check with it.
            let delegation = Delegation {
                spec,
                prompt: task.prompt.clone(),
                cancel: CancellationToken::new(),
                resumed,
                isolate: None,
                check,
                id: Some(task.session),
                continues: None,
                slot: None,
                placement: Placement::Local,
                placement_tags: Vec::new(),
            };
            // Its session goes with it, answered or given up on (a drain).
            let stop = Stop(self.handle.clone(), task.session);
            let delegated = Launcher::delegate(&self.handle, delegation).await;
            drop(stop);
            let (outcome, checked) = match delegated {
                Ok(delegated) => (delegated.outcome, delegated.check),
                Err(e) => return Ran::said("failed", e.to_string()),
            };
            let Some(outcome) = outcome else {
                return Ran::said("failed", "the worker shut down");
            };
            let ran = Ran::of(outcome);
            let ran = Ran {
                check: checked,
                ..ran
            };
            let Some(tree) = &tree else {
                return ran;
            };
            // What it changed goes back, whatever its outcome: its lead
            // keeps the work of one that did not finish on a branch.
            let sent = self.cache.send_back(tree).await;
            match sent {
                Ok(work) => Ran { work, ..ran },
                Err(why) => Ran::said(
                    "failed (workspace)",
                    format!(
                        "its work could not be sent back: {why}; it ended {}: {}",
                        ran.outcome, ran.text
                    ),
                ),
            }
        })
    }
}

/// Writes `bytes` as a new file at `path` that only this user reads.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A task's folder, removed when dropped.
struct Gone(std::path::PathBuf);

impl Drop for Gone {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A task's session, cancelled and stopped when dropped.
struct Stop(Handle, crate::protocol::SessionId);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.cancel(self.1);
        self.0.stop_session(self.1);
    }
}

impl Local {
    /// Takes up sub-agent `session`'s journal as `taken` holds it: written
    /// here to resume from when no call that may have changed its folder
    /// (gone with the worker that ran it) had started, else started over in
    /// the stream; kept there from now on while the guard is held. Whether
    /// it resumes.
    async fn take_up(
        &self,
        session: crate::protocol::SessionId,
        taken: crate::remote::journals::Taken,
    ) -> Result<(bool, crate::journal::Mirrored), String> {
        let path = self.handle.journal_path(session);
        // What this worker may have kept of an earlier run of it is not read.
        let _ = std::fs::remove_file(&path);
        let mut resumed = false;
        if !taken.lines.is_empty() {
            let read = crate::journal::parse_journal(&path, &taken.lines);
            let records = read.map_err(|e| e.to_string())?.records;
            let tools = &self.plan.tools;
            let changes = |name: &str| tools.get(name).is_none_or(|t| !t.read_only());
            if crate::remote::journals::resumable(&records, changes) {
                write_private(&path, &taken.lines)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                resumed = true;
            } else {
                taken.journal.restart().await?;
            }
        }
        let mirrored = (self.handle).mirror_journal(session, taken.journal.clone());
        Ok((resumed, mirrored))
    }

    /// The task's session in `folder` (working in `workdir`, its parent's
    /// folder in it): its role's prompt (the lead's memory files in it
    /// already; not this machine's), its tools and rules, this machine's
    /// model; the run's hooks asked of its lead through `lead`, with this
    /// machine's own.
    fn spec(
        &self,
        task: &RemoteTask,
        folder: &std::path::Path,
        workdir: &std::path::Path,
        lead: Option<Arc<dyn crate::hooks::forward::Asker>>,
    ) -> Result<SessionSpec, String> {
        let plan = &self.plan;
        let model = plan.models.lead();
        let prompt = task.system_prompt.clone();
        let mut spec = SessionSpec::new(task.role.clone(), model.id, prompt);
        // It works in its folder as a sub-agent works in its checkout: its
        // tools there, its commands writing only there.
        spec.checkout = Some(crate::protocol::Checkout {
            root: folder.to_owned(),
            workdir: workdir.to_owned(),
            into: folder.to_owned(),
            prefix: std::path::PathBuf::new(),
            base: String::new(),
            branch: String::new(),
            lacks: Vec::new(),
            borrowed: true,
        });
        spec.provider = model.provider;
        let tools = match &task.tools {
            Some(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                plan.tools.only(&names)
            }
            None => plan.tools.clone(),
        };
        spec.tools = tools;
        spec.max_turns = task.max_turns.clamp(1, self.max_turns.max(1));
        spec.permission_mode = task.permission_mode;
        // Nobody here answers a question: what the person's ask rules would
        // ask about is refused.
        let refused: Vec<String> = task.deny.iter().chain(&task.ask).cloned().collect();
        let (deny, bad) = crate::tools::rules::parse_list(&refused);
        if let Some(bad) = bad.first() {
            return Err(format!("the task's rule {bad:?} does not read"));
        }
        spec.deny_rules = deny.into();
        let (bash, bad) = crate::tools::rules::parse_list(&task.bash);
        if let Some(bad) = bad.first() {
            return Err(format!("the task's Bash rule {bad:?} does not read"));
        }
        spec.bash_rules = bash.into();
        // A sub-agent, whatever hooks its run has: it ends as one
        // (`SubagentStop`), with its lead's hooks when there are.
        spec.hooks = Some(match lead {
            Some(lead) => Arc::new(plan.hooks.with_lead(&task.hooks, lead)?),
            None => plan.hooks.clone(),
        });
        plan.models.describe(&mut spec);
        Ok(spec)
    }
}
