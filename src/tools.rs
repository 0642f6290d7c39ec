//! Tools: the [`Tool`] trait, the [`ToolRegistry`] a session offers its model, and the
//! scheduler that decides which calls of a turn may run together.

pub mod bash;
pub(crate) mod beneath;
pub mod edit;
pub(crate) mod files;
pub mod glob;
pub mod grep;
pub(crate) mod live;
pub mod ls;
pub mod multi_edit;
pub mod narrowing;
pub mod permissions;
pub mod protected;
pub mod read;
pub mod rules;
pub mod sandbox;
pub mod scheduler;
mod shared_specs;
pub mod skill;
pub mod todo_write;
pub(crate) mod walk;
pub mod web_fetch;
pub mod write;

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;
use crate::llm::ToolSpec;
use crate::protocol::SessionId;

/// Whether a call may run beside others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Concurrency {
    /// No side effects another call could observe: runs in a parallel group.
    Safe,
    /// Touches these resources (paths, or `*` for the whole workspace): runs
    /// beside the unsafe calls next to it whose resources are apart
    /// ([`scheduler::may_overlap`]), else alone.
    Unsafe {
        /// What the call writes.
        resources: Vec<String>,
    },
}

/// What a tool call gets besides its input.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The workspace root every path is resolved against.
    pub workspace: PathBuf,
    /// The private checkout the workspace is in, for an isolated sub-agent (or
    /// one of its sub-agents): the whole clone (its git directory too) is what
    /// its commands may write.
    pub checkout: Option<Arc<crate::protocol::Checkout>>,
    /// The run the calling session belongs to.
    pub run: SessionId,
    /// The run's checkpoints of the workspace: one is taken before the first
    /// call that may change it. `None` in a private checkout.
    pub checkpoints: Option<Arc<crate::git::checkpoint::Checkpoints>>,
    /// Places no tool may touch, even inside the workspace (canonical): the run's
    /// own state ([`crate::state::StateDir::private`]), which a workspace that is
    /// `$HOME` contains.
    pub private: Arc<[PathBuf]>,
    /// What a Read deny rule refuses: left out of every listing (Glob, Grep,
    /// Ls), as a Read of it would be refused.
    pub read_deny: ReadDeny,
    /// The calling session.
    pub session: SessionId,
    /// What the runtime's file tools share: write locks, what each session
    /// has read.
    pub files: Arc<files::FileState>,
    /// The id of the call being run.
    pub call_id: String,
    /// Cancelled when the turn is cancelled; long tools should watch it.
    pub cancel: CancellationToken,
    /// Where file-changing tools report their diffs; the runner publishes them.
    pub changes: Changes,
    /// Tokens spent on the caller's behalf (by sub-agents), rolled up into its stats.
    pub spent: Spent,
    /// Publishes events as the calling session (a Task call's sub-agent waiting
    /// for a slot, say); `None` outside a session.
    pub events: Option<crate::events::Publisher>,
    /// An earlier incarnation of the session had started this call (it crashed,
    /// or its process died): a tool that resumes by call id picks up what it
    /// began (see [`Tool::resumable`]).
    pub resumed: bool,
    /// Folders outside the workspace Read may read in (the person's skills'),
    /// canonical.
    pub read_roots: Arc<[PathBuf]>,
    /// A background sub-agent to follow again (its task id): the Task call
    /// that started it is made again, by a run resumed from its journal
    /// before it had the sub-agent's result.
    pub reattach: Option<SessionId>,
    /// What narrows the calling session (a slash command's or a loaded
    /// skill's `allowed-tools`), shared by its calls.
    pub narrowing: Arc<narrowing::Narrowing>,
    /// The folders the runtime's Bash commands ran in, compared before and
    /// after each to tell what it changed.
    pub trees: Arc<bash::Trees>,
    /// Set when the person answers no to a call of this call's turn: the
    /// turn's calls not started yet are then neither asked about nor run.
    pub refused_in_turn: Arc<std::sync::atomic::AtomicBool>,
}

impl ToolContext {
    /// This call's refusal, when the person refused an earlier call of its
    /// turn.
    pub fn refused_earlier(&self) -> Result<(), ToolError> {
        match self
            .refused_in_turn
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            true => Err(ToolError::Failed(permissions::REFUSED_EARLIER.into())),
            false => Ok(()),
        }
    }
}

/// The Read deny rules a listing honours: the run's and the calling role's.
#[derive(Clone, Debug, Default)]
pub struct ReadDeny {
    rules: Arc<rules::Rules>,
    role: Arc<[rules::Rule]>,
}

impl ReadDeny {
    /// The deny rules of `rules` and `role` (a role's `disallowedTools`).
    pub fn new(rules: Arc<rules::Rules>, role: Arc<[rules::Rule]>) -> Self {
        Self { rules, role }
    }

    /// Whether reading `path` is refused by a Read deny rule.
    pub fn denies(&self, path: &std::path::Path) -> bool {
        let any = |rules: &[rules::Rule]| rules.iter().any(|r| r.tool == "Read");
        (any(&self.rules.deny) || any(&self.role)) && self.rules.denies_read(&self.role, path)
    }
}

/// The tools a role file, a command's or a skill's `allowed-tools` may name
/// (Claude Code's names; any case, so Claude Code's older `LS` is `Ls`).
pub const KNOWN_TOOLS: [&str; 14] = [
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "Ls",
    "Glob",
    "Grep",
    "Bash",
    "Task",
    "TaskOutput",
    "TaskStop",
    "TodoWrite",
    "WebFetch",
    "Skill",
];

/// The tool of [`KNOWN_TOOLS`] `name` names, in any case.
pub fn known_tool(name: &str) -> Option<&'static str> {
    KNOWN_TOOLS
        .iter()
        .copied()
        .find(|k| k.eq_ignore_ascii_case(name))
}

/// What a call spent through others (a sub-agent's tokens and their cost), for
/// the caller's totals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spending {
    /// Tokens.
    pub usage: crate::conversation::Usage,
    /// Their cost in USD; `None` when a price was unknown.
    pub cost_usd: Option<f64>,
}

impl Default for Spending {
    /// Nothing spent, at a known cost of nothing.
    fn default() -> Self {
        Self {
            usage: crate::conversation::Usage::default(),
            cost_usd: Some(0.0),
        }
    }
}

/// Where a call adds what it spent through others.
#[derive(Clone, Debug, Default)]
pub struct Spent(Arc<std::sync::Mutex<Spending>>);

impl Spent {
    /// Adds a run's tokens and cost.
    pub fn add(&self, stats: &crate::protocol::RunStats) {
        let mut spent = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        spent.usage.add(&stats.usage);
        spent.cost_usd = crate::protocol::add_costs(spent.cost_usd, stats.cost_usd);
    }

    /// Takes what was added so far.
    pub fn take(&self) -> Spending {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The file changes a call made, as unified diffs.
#[derive(Clone, Debug, Default)]
pub struct Changes(Arc<std::sync::Mutex<Vec<FileChange>>>);

/// One file's change.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileChange {
    /// The file, relative to the workspace.
    pub path: String,
    /// Its unified diff.
    pub diff: String,
    /// The file did not exist before the call.
    pub created: bool,
    /// Found by comparing the folder before and after the call (a Bash
    /// command's): neither the call's arguments nor its result hold the diff.
    #[serde(default)]
    pub compared: bool,
    /// Every call running in the folder when it was seen, when there were
    /// several.
    #[serde(default)]
    pub calls: Vec<crate::protocol::CallRef>,
    /// More files changed than are told one by one: this many, all below `path`.
    #[serde(default)]
    pub count: Option<usize>,
}

impl Changes {
    /// Records a change to a file that was there (its result shows the diff).
    pub fn record(&self, path: &str, diff: &str) {
        self.push(path, diff, false);
    }

    /// Records a file the call created (its arguments hold the content; its
    /// result does not repeat it).
    pub fn record_created(&self, path: &str, diff: &str) {
        self.push(path, diff, true);
    }

    fn push(&self, path: &str, diff: &str, created: bool) {
        self.add(FileChange {
            path: path.to_owned(),
            diff: diff.to_owned(),
            created,
            compared: false,
            calls: Vec::new(),
            count: None,
        });
    }

    /// Records a change as it is.
    pub fn add(&self, change: FileChange) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(change);
    }

    /// Takes every change recorded so far.
    pub fn take(&self) -> Vec<FileChange> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl ToolContext {
    /// A context for a call in `session` on `workspace` (a canonical directory).
    pub fn new(workspace: PathBuf, session: SessionId) -> Self {
        Self {
            workspace,
            checkout: None,
            run: session,
            checkpoints: None,
            private: Arc::from([]),
            read_deny: ReadDeny::default(),
            session,
            files: Arc::default(),
            call_id: String::new(),
            cancel: CancellationToken::new(),
            changes: Changes::default(),
            spent: Spent::default(),
            events: None,
            resumed: false,
            read_roots: Arc::from([]),
            reattach: None,
            narrowing: Arc::default(),
            trees: Arc::default(),
            refused_in_turn: Arc::default(),
        }
    }

    /// Resolves a path the model gave against the workspace; refuses one outside
    /// it, and one in a private place.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let resolved = sandbox::resolve(&self.workspace, path)?;
        // A private place that holds the workspace (a private checkout's) is
        // not refused: the path is inside the workspace already.
        let private: Vec<PathBuf> = self
            .private
            .iter()
            .filter(|place| !self.workspace.starts_with(place))
            .cloned()
            .collect();
        sandbox::refuse_private(&resolved, &private, path)?;
        Ok(resolved)
    }

    /// Where the file tools open what they open: beneath the workspace, never in
    /// its private places ([`beneath`]).
    pub(crate) fn beneath(&self) -> beneath::Beneath {
        beneath::Beneath::new(self.workspace.clone(), self.private.clone())
    }

    /// An absolute `path` in one of the read-only folders ([`Self::read_roots`]):
    /// the path, and the folder to open it beneath.
    pub(crate) fn in_read_root(&self, path: &str) -> Option<(PathBuf, beneath::Beneath)> {
        let path = std::path::Path::new(path);
        if !path.is_absolute() {
            return None;
        }
        // `..` is worked out by the opening beneath the root, not by the name.
        let root = self.read_roots.iter().find(|root| path.starts_with(root))?;
        Some((
            path.to_owned(),
            beneath::Beneath::new(root.clone(), self.private.clone()),
        ))
    }

    /// How a path is shown to the model: relative to the workspace when inside it.
    pub fn display(&self, path: &std::path::Path) -> String {
        sandbox::display(&self.workspace, path)
    }
}

/// A tool the model can call.
pub trait Tool: Send + Sync + Debug + 'static {
    /// The name the model calls it by (Claude Code's names: `Read`, `Bash`, …).
    fn name(&self) -> &str;
    /// What it does, written for a model.
    fn description(&self) -> &str;
    /// JSON schema of the input.
    fn input_schema(&self) -> Value;
    /// True when the tool never changes anything (and so is safe to replay).
    fn read_only(&self) -> bool;
    /// Whether this particular call may run beside others.
    fn concurrency(&self, input: &Value) -> Concurrency;
    /// True when the tool bounds its own parallelism (Task, by the run-wide cap on
    /// sub-agents), so a turn's parallel group does not count its calls.
    fn bounds_itself(&self) -> bool {
        false
    }
    /// True when calling it again with the same call id carries on the first call
    /// instead of repeating its effects (Task finds the sub-agent that call
    /// started), so a session resumed from its journal runs it again rather than
    /// reporting it interrupted.
    fn resumable(&self) -> bool {
        false
    }
    /// True when a call ends itself soon after its cancellation, with what it
    /// had done by then (Bash: its output so far, once every process it started
    /// is killed): a cancel waits for it a moment rather than dropping it.
    fn ends_on_cancel(&self) -> bool {
        false
    }
    /// True when a call that an earlier incarnation had started may simply be
    /// made again on resume: by default, when the tool changes nothing.
    fn rerun_on_resume(&self) -> bool {
        self.read_only()
    }
    /// What a call with `input` that succeeded narrows its session to from
    /// then on (`Skill`: the loaded skill's `allowed-tools`).
    fn narrows(&self, _input: &Value) -> Option<narrowing::Narrow> {
        None
    }
    /// Runs the call. The returned text goes back to the model; an error becomes an
    /// error result the model also sees.
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
}

/// Tools that come and go while a session runs (an MCP server's, which it may
/// relist): asked for at each request and each call.
pub trait ToolSource: Send + Sync + Debug + 'static {
    /// What the model is told about each tool offered now.
    fn specs(&self) -> Vec<ToolSpec>;
    /// The tool offered now under `name`.
    fn get(&self, name: &str) -> Option<Arc<dyn Tool>>;
    /// True when it can never offer anything.
    fn is_empty(&self) -> bool;
}

/// The tools offered to one session.
#[derive(Clone, Debug, Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
    timeout: Option<Duration>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every built-in tool, by Claude Code's names: Read, Write, Edit, Ls, Glob,
    /// Grep and Bash.
    pub fn standard() -> Self {
        Self::new()
            .with(read::Read)
            .with(write::Write)
            .with(edit::Edit)
            .with(multi_edit::MultiEdit)
            .with(todo_write::TodoWrite)
            .with(web_fetch::WebFetch)
            .with(ls::Ls)
            .with(glob::Glob)
            .with(grep::Grep)
            .with(bash::Bash::default())
    }

    /// The tools of this registry named in `names`, in this registry's order.
    pub fn only(&self, names: &[&str]) -> Self {
        Self {
            tools: self
                .tools
                .iter()
                .filter(|t| names.contains(&t.name()))
                .cloned()
                .collect(),
            sources: self.sources.clone(),
            timeout: self.timeout,
        }
    }

    /// Adds tools that come and go (an MCP server's), offered after the others.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// The built-in tools' names, in the order they are offered.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    /// Adds a tool; a later tool with the same name replaces the earlier one.
    pub fn with(mut self, tool: impl Tool) -> Self {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(Arc::new(tool));
        self
    }

    /// Sets the time one call may take (default 11 minutes: above Bash's own
    /// 10-minute maximum, so that Bash reports its timeout itself, with its output).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The time one call may take.
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(Duration::from_secs(660))
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .cloned()
            .or_else(|| self.sources.iter().find_map(|s| s.get(name)))
    }

    /// What the model is told about each tool, a built-in one winning over a
    /// source's of the same name: one copy of the list for every session that
    /// offers the same tools.
    pub fn specs(&self) -> Arc<[ToolSpec]> {
        let mut specs: Vec<ToolSpec> = self
            .tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.input_schema(),
            })
            .collect();
        for source in &self.sources {
            for spec in source.specs() {
                if !specs.iter().any(|s| s.name == spec.name) {
                    specs.push(spec);
                }
            }
        }
        shared_specs::shared(specs)
    }

    /// True when no tool is offered, nor ever can be.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.sources.iter().all(|s| s.is_empty())
    }
}

/// The JSON schema of a tool's input type, as models are shown it. Every model
/// request carries every tool's schema: each type's is generated once per
/// process, then copied.
pub(crate) fn schema<T: schemars::JsonSchema + 'static>() -> Value {
    use std::any::TypeId;
    use std::collections::HashMap;
    static SCHEMAS: std::sync::OnceLock<std::sync::Mutex<HashMap<TypeId, Value>>> =
        std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(Default::default);
    let mut schemas = schemas
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    schemas
        .entry(TypeId::of::<T>())
        .or_insert_with(|| {
            serde_json::to_value(schemars::schema_for!(T))
                .unwrap_or_else(|_| serde_json::json!({"type": "object"}))
        })
        .clone()
}

/// Parses a call's arguments into the tool's input type; a mismatch is an
/// invalid-input error the model can correct.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input).map_err(|e| ToolError::InvalidInput(e.to_string()))
}

/// Runs a tool's blocking file-system work off the async runtime; a panic in it
/// becomes a crash result the model sees.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::Crashed(e.to_string()))?
}

/// A context on a fresh temporary workspace, for the tools' unit tests.
#[cfg(test)]
pub(crate) fn test_context() -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().canonicalize().unwrap();
    (dir, ToolContext::new(workspace, SessionId::new()))
}

/// A write-like call is unsafe on the path it names.
pub(crate) fn unsafe_on_path(input: &Value) -> Concurrency {
    let path = input
        .get("file_path")
        .and_then(Value::as_str)
        .unwrap_or("*");
    Concurrency::Unsafe {
        resources: vec![path.to_owned()],
    }
}

/// How long computing one diff may take: a diff goes into an event, a tool result
/// or a permission question, and two large files with little in common could
/// otherwise take minutes.
pub(crate) const DIFF_TIME_LIMIT: Duration = Duration::from_secs(1);

/// The largest diff an event or a tool result holds; a larger change is summarized.
pub(crate) const MAX_DIFF_BYTES: usize = 256 * 1024;

/// A unified diff of one file's change, as events and models are shown it; a
/// one-line summary instead when it took longer than [`DIFF_TIME_LIMIT`] to compute
/// or is larger than [`MAX_DIFF_BYTES`].
pub(crate) fn unified_diff(shown: &str, old: &str, new: &str) -> String {
    let summary = |why: String| {
        let (before, after) = (old.lines().count(), new.lines().count());
        format!("[diff of {shown} not shown: {why}; {before} lines before, {after} after]\n")
    };
    let (diff, coarse) = line_diff(old, new);
    if coarse {
        return summary(format!(
            "it took longer than {} s to compute",
            DIFF_TIME_LIMIT.as_secs()
        ));
    }
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{shown}"), &format!("b/{shown}"))
        .to_string();
    if text.len() > MAX_DIFF_BYTES {
        return summary(format!("it is larger than {} KiB", MAX_DIFF_BYTES / 1024));
    }
    text
}

/// A diff for a person deciding on a change, with `context` lines around each
/// change: never cut (they must see all of it) and computed within
/// [`DIFF_TIME_LIMIT`]; past it, a coarse diff (whole blocks replaced) under a note
/// that says so.
pub(crate) fn full_diff(old: &str, new: &str, context: usize) -> String {
    let (diff, coarse) = line_diff(old, new);
    let text = diff.unified_diff().context_radius(context).to_string();
    if coarse {
        format!("[a coarse diff: a closer one took too long to find]\n{text}")
    } else {
        text
    }
}

/// The line diff of `old` to `new`, computed within [`DIFF_TIME_LIMIT`], and whether
/// it ran out of time: then it is still correct and complete, but coarse.
pub(crate) fn line_diff<'a>(old: &'a str, new: &'a str) -> (similar::TextDiff<'a, 'a, str>, bool) {
    let started = std::time::Instant::now();
    let diff = similar::TextDiff::configure()
        .timeout(DIFF_TIME_LIMIT)
        .diff_lines(old, new);
    (diff, started.elapsed() >= DIFF_TIME_LIMIT)
}

/// No tool result is longer than this, whatever the tool: a model's context is
/// finite and a careless call must not flood it.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;

/// A tool's summary followed by its diff.
pub(crate) fn with_diff(summary: String, diff: &str) -> String {
    if diff.is_empty() {
        summary
    } else {
        format!("{summary}\n{diff}")
    }
}

/// The result of a call that created `shown` with `content`: the content is in
/// the call's own arguments, so it is not repeated.
pub(crate) fn created(shown: &str, content: &str) -> String {
    let lines = content.lines().count();
    let bytes = content.len();
    format!("Created {shown} ({lines} lines, {bytes} bytes).")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_offering_the_same_tools_share_one_list_of_specs() {
        let (one, other) = (ToolRegistry::standard(), ToolRegistry::standard());
        let (first, second) = (one.specs(), other.specs());
        assert!(Arc::ptr_eq(&first, &second));
        assert!(first.iter().any(|spec| spec.name == "Read"));
        let fewer = ToolRegistry::standard().only(&["Read"]).specs();
        assert!(!Arc::ptr_eq(&first, &fewer));
        assert_eq!(fewer.len(), 1);
    }

    /// Two files of distinct lines in a shuffled order: nearly every line is in
    /// both, in an order a shortest diff takes minutes to untangle.
    fn tangled() -> (String, String) {
        let n = 200_000u64;
        let old: String = (0..n).map(|i| format!("line {i}\n")).collect();
        // A fixed permutation (multiplication by a unit modulo n), no randomness.
        let new: String = (0..n)
            .map(|i| format!("line {}\n", (i * 7_919) % n))
            .collect();
        (old, new)
    }

    #[test]
    fn a_pathological_diff_is_summarized_within_its_time_limit() {
        let (old, new) = tangled();
        let started = std::time::Instant::now();
        let diff = unified_diff("big.txt", &old, &new);
        // Generous: fires only when the limit did not hold at all.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            diff,
            "[diff of big.txt not shown: it took longer than 1 s to compute; 200000 lines \
             before, 200000 after]\n"
        );
    }

    #[test]
    fn a_large_diff_is_summarized_for_events_but_never_cut_for_a_person() {
        let old: String = (0..20_000).map(|i| format!("old {i}\n")).collect();
        let new: String = (0..20_000).map(|i| format!("new {i}\n")).collect();
        assert_eq!(
            unified_diff("x.txt", &old, &new),
            "[diff of x.txt not shown: it is larger than 256 KiB; 20000 lines before, 20000 \
             after]\n"
        );
        let diff = full_diff(&old, &new, 2);
        assert!(diff.len() > old.len() + new.len(), "{}", diff.len());
        assert!(diff.contains("+new 19999\n") && diff.contains("-old 0\n"));
        let small = unified_diff("a.txt", "one\n", "two\n");
        assert_eq!(small, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+two\n");
    }
}
