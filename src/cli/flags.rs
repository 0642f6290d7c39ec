//! What the command line accepts: the [`Cli`] flags, the subcommands, and the
//! hidden test flags (`--retry-base-ms`, and the supervision drill
//! `--inject-panic-at-turn` / `--inject-panics`). What the flags become (the workspace,
//! the roles, the providers) is worked out in `setup` and `providers`.

use std::path::PathBuf;

use clap::Parser;

use crate::session::DEFAULT_MAX_TURNS;
use crate::task;
use crate::tools::bash::SandboxMode;
use crate::tools::permissions::PermissionMode;

/// Run a task with an LLM agent in a repository.
#[derive(Debug, Parser)]
#[command(name = "orchestrate", version, about)]
pub struct Cli {
    /// What to do instead of running a task.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The task, in plain words.
    pub task: Option<String>,
    /// Continue the workspace's latest run with this prompt.
    #[arg(
        short = 'c',
        long = "continue",
        value_name = "PROMPT",
        conflicts_with = "task"
    )]
    pub continue_with: Option<String>,
    /// Work in DIR instead of the current directory.
    #[arg(short = 'C', value_name = "DIR", global = true)]
    pub workspace: Option<PathBuf>,
    /// A directory of role files searched last (later roles replace earlier ones).
    #[arg(long, value_name = "DIR", global = true)]
    pub agents_dir: Option<PathBuf>,
    /// openai, anthropic, replay, or a provider named in orchestrate.toml (default:
    /// openai for --base-url; else the file's; else by the keys set:
    /// ANTHROPIC_API_KEY, then OPENAI_API_KEY / OPENAI_BASE_URL).
    #[arg(long, value_name = "NAME", global = true)]
    pub provider: Option<String>,
    /// The provider's API root: with /v1 for OpenAI-compatible servers, the bare host
    /// for Anthropic [env: OPENAI_BASE_URL, ANTHROPIC_BASE_URL].
    #[arg(long, value_name = "URL", global = true)]
    pub base_url: Option<String>,
    /// Model id or alias [env: ORCHESTRATE_MODEL].
    #[arg(long, value_name = "M", global = true)]
    pub model: Option<String>,
    /// The model an agent carries on with when its own does not exist (404) or
    /// stays overloaded after its retries (429, 529), once; a role's
    /// `fallbackModel` overrides it.
    #[arg(long, value_name = "M", global = true)]
    pub fallback_model: Option<String>,
    /// Record every provider request and its raw response to this JSONL cassette.
    #[arg(long, value_name = "FILE", global = true)]
    pub record: Option<PathBuf>,
    /// Answer every provider request from this cassette, with no network.
    #[arg(long, value_name = "FILE", global = true)]
    pub replay: Option<PathBuf>,
    /// Play the cassette on where the run leaves the recording (another task, a tool
    /// result that failed where the recorded one succeeded, or the reverse): for
    /// editing cassettes.
    #[arg(long, requires = "replay", global = true)]
    pub replay_lenient: bool,
    /// Let this workspace's orchestrate.toml send model requests to the addresses it
    /// names, and its .claude/settings*.json allow rules count (remembered in
    /// ~/.config/orchestrate/config.toml).
    #[arg(long, global = true)]
    pub trust_workspace: bool,
    /// Permission rules that let calls run without asking, in Claude Code's syntax
    /// (`Bash(npm test:*)`, `Edit(src/**)`, `Read`); several in one value
    /// (commas or spaces between them), or the flag again.
    #[arg(long = "allowedTools", alias = "allowed-tools", value_name = "RULES", action = clap::ArgAction::Append, global = true)]
    pub allowed_tools: Vec<String>,
    /// Permission rules that refuse calls, whatever the mode; same syntax.
    #[arg(long = "disallowedTools", alias = "disallowed-tools", value_name = "RULES", action = clap::ArgAction::Append, global = true)]
    pub disallowed_tools: Vec<String>,
    /// Print one JSON event per line instead of the answer.
    #[arg(long, global = true)]
    pub json: bool,
    /// What tools may do without asking: default (asks for edits and commands),
    /// acceptEdits (asks for commands), plan (read-only), bypassPermissions.
    #[arg(long, value_name = "MODE", default_value = "default", value_parser = parse_mode, global = true)]
    pub permission_mode: PermissionMode,
    /// Where Bash commands may write: workspace-write (the workspace, the temporary
    /// directory and the sandbox's writable paths in the user's configuration; the
    /// default) or off.
    #[arg(long, value_name = "MODE", value_parser = parse_sandbox, global = true)]
    pub sandbox: Option<SandboxMode>,
    /// Run this role instead of the orchestrator.
    #[arg(long, value_name = "NAME", default_value = "orchestrator")]
    pub agent: String,
    /// Sub-agents running at once at each level across the run; the rest wait in order.
    #[arg(long, value_name = "N", default_value_t = task::DEFAULT_MAX_PARALLEL, global = true)]
    pub max_parallel: usize,
    /// Which sub-agents work in a private git checkout when their role does not
    /// say: auto (those that may edit files, in a git repository), worktree
    /// (all) or none.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_isolation, global = true)]
    pub isolation: crate::isolation::Policy,
    /// Levels of sub-agents below the lead (0: no sub-agents).
    #[arg(long, value_name = "N", default_value_t = task::DEFAULT_MAX_DEPTH, global = true)]
    pub max_depth: u32,
    /// Print only the final answer.
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    /// Model turns allowed per run before the lead is stopped (a role's maxTurns wins).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_TURNS, global = true)]
    pub max_turns: u32,
    /// Dollars the whole run (the lead and every sub-agent) may spend; agents stop
    /// at their next turn boundary once it is spent.
    #[arg(long, value_name = "USD", value_parser = parse_cost, global = true)]
    pub max_cost: Option<f64>,
    /// Tokens the whole run may use; agents stop at their next turn boundary once
    /// they are used.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), global = true)]
    pub max_tokens: Option<u64>,
    /// Wall time the whole run may take (90s, 5m, 1h30m); then every agent stops.
    #[arg(long, value_name = "DURATION", value_parser = crate::session::budget::parse_duration, global = true)]
    pub timeout: Option<std::time::Duration>,
    /// NATS servers (comma-separated) whose workers may run this run's
    /// sub-agents (`orchestrate worker --join`); a role's `placement` says
    /// which.
    #[cfg(feature = "nats")]
    #[arg(long, value_name = "URLS", global = true)]
    pub nats: Option<String>,
    /// Run every sub-agent that may run elsewhere on a worker (with --nats, or
    /// `nats` in the user's configuration).
    #[cfg(feature = "nats")]
    #[arg(long, global = true)]
    pub remote_only: bool,
    /// How long a permission question waits for `orchestrate approve` when
    /// there is no terminal to ask (5m, 1h); 0, the default: refused at once.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = crate::session::budget::parse_duration, global = true)]
    pub approval_timeout: std::time::Duration,
    /// Requests made at most for one model turn.
    #[arg(long, value_name = "N", default_value_t = 5, global = true)]
    pub max_attempts: u32,
    /// Seconds without a streamed event before a stream counts as stalled.
    #[arg(long, value_name = "SECS", default_value_t = 120, global = true)]
    pub idle_timeout: u64,
    /// First retry backoff in milliseconds (doubles each attempt).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 500,
        hide = true,
        global = true
    )]
    pub retry_base_ms: u64,
    /// Supervision drill: the session panics when it reaches this turn…
    /// (only in builds with the `test-support` feature, which the tests enable)
    #[cfg(feature = "test-support")]
    #[arg(long, value_name = "TURN", hide = true, global = true)]
    pub inject_panic_at_turn: Option<u32>,
    /// …this many times (restarts included).
    #[cfg(feature = "test-support")]
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        hide = true,
        global = true
    )]
    pub inject_panics: u32,
}

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Inspect the agent roles: built-in, the user's, the workspace's.
    Agents {
        /// What to do with them.
        #[command(subcommand)]
        action: AgentsAction,
    },
    /// The MCP servers of this workspace and the user: where each is defined,
    /// whether it starts, and its tools.
    Mcp {
        /// What to do with them.
        #[command(subcommand)]
        action: McpAction,
    },
    /// List this workspace's runs, newest first, or show one.
    Sessions {
        /// What to do with them (default: list).
        #[command(subcommand)]
        action: Option<SessionsAction>,
    },
    /// Continue a run: after a crash, from where its journals end; after its end,
    /// with PROMPT as a follow-up.
    Resume {
        /// The run: a unique prefix of its id (default: the latest run).
        id: Option<String>,
        /// A follow-up prompt.
        prompt: Option<String>,
    },
    /// Put the workspace back as it was before a run changed it (the latest run
    /// by default), or as another of its checkpoints; the present state is
    /// checkpointed first, so a rewind can be undone.
    Rewind {
        /// The run: a unique prefix of its id (default: the latest run).
        id: Option<String>,
        /// The checkpoint to go back to (default: 1, before the run's first change).
        #[arg(long, value_name = "N")]
        to: Option<u32>,
        /// Rewind even over changes made after the run's last checkpoint.
        #[arg(long)]
        force: bool,
    },
    /// Show the agents of the live run(s) in this workspace, and the
    /// permission questions waiting for an answer.
    Ps {
        /// Show each question waiting whole: the whole command, or the file and
        /// its change.
        #[arg(long)]
        full: bool,
    },
    /// Send a message to a live agent; it joins at the agent's next turn boundary.
    Steer {
        /// The agent, as its row names it (`explorer#2`) or a prefix of its session id.
        agent: String,
        /// The message.
        message: String,
    },
    /// Stop a live agent at its next turn boundary; its caller gets its work so far.
    Stop {
        /// The agent, as its row names it (`explorer#2`) or a prefix of its session id.
        agent: String,
    },
    /// Cancel a live agent now, with its running tool calls.
    Kill {
        /// The agent, as its row names it (`explorer#2`) or a prefix of its session id.
        agent: String,
    },
    /// Run sub-agent tasks of runs on other machines: join NATS and take
    /// tasks from their work queue (needs the `nats` feature).
    #[cfg(feature = "nats")]
    Worker {
        /// The NATS servers, comma-separated (nats://h1:4222,nats://h2:4222).
        #[arg(long, value_name = "URLS", required = true)]
        join: String,
        /// Tasks run at once, at most.
        #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
        slots: u32,
        /// A tag of this worker: it takes untagged tasks and those of its tags.
        #[arg(long = "tag", value_name = "T")]
        tags: Vec<String>,
        /// A lead's public key whose tasks it runs (beside `trust_leads` in the
        /// user's config; the same user's lead on this machine is trusted
        /// without it).
        #[arg(long = "trust-lead", value_name = "KEY")]
        trust_lead: Vec<String>,
        /// The most a task may ask: a task asking more is refused.
        #[arg(long, value_name = "MODE", default_value = "acceptEdits", value_parser = parse_mode)]
        max_permission_mode: PermissionMode,
        /// How long it waits for running tasks when asked to stop, before
        /// handing them back.
        #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::session::budget::parse_duration)]
        drain: std::time::Duration,
        /// The ack wait of the consumers it makes, in milliseconds (only in
        /// builds with the `test-support` feature: the tests of redelivery).
        #[cfg(feature = "test-support")]
        #[arg(long, value_name = "MS", default_value_t = 30_000, hide = true)]
        ack_wait_ms: u64,
    },
    /// Answer a live agent's permission question (`orchestrate ps` lists them).
    Approve {
        /// The agent, as its row names it (`explorer#2`) or a prefix of its session id.
        agent: String,
        /// yes, no or always.
        #[arg(default_value = "yes", value_parser = parse_answer)]
        answer: String,
        /// The question (`q-…`, as `orchestrate ps` lists it); needed only when
        /// the agent has several.
        #[arg(long, value_name = "QUESTION")]
        id: Option<String>,
    },
}

fn parse_answer(text: &str) -> Result<String, String> {
    match crate::tools::permissions::Answer::from_word(text) {
        Some(answer) => Ok(match answer {
            crate::tools::permissions::Answer::Yes => "yes",
            crate::tools::permissions::Answer::No => "no",
            crate::tools::permissions::Answer::Always => "always",
        }
        .to_owned()),
        None => Err(format!("{text:?} is not an answer (say yes, no or always)")),
    }
}

/// `orchestrate sessions …`
#[derive(Debug, clap::Subcommand)]
pub enum SessionsAction {
    /// List the runs, newest first (the default).
    List,
    /// Show one run's agents, their outcomes and counters, and its final answer.
    Show {
        /// The run: a unique prefix of its id.
        id: String,
    },
    /// Remove the git branches and leftover checkouts of runs older than an age.
    Prune {
        /// How old a run must be (`30d`, `12h`, `90m`).
        #[arg(long, value_name = "AGE", default_value = "7d", value_parser = parse_age)]
        older_than: std::time::Duration,
    },
}

fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    crate::session::budget::parse_duration(text)
}

/// `orchestrate mcp …`
#[derive(Debug, clap::Subcommand)]
pub enum McpAction {
    /// Start each configured server, list its tools, and stop it again.
    List,
}

/// `orchestrate agents …`
#[derive(Debug, clap::Subcommand)]
pub enum AgentsAction {
    /// List every role with where it comes from.
    List,
    /// Show one role: its settings and its prompt.
    Show {
        /// The role's name.
        name: String,
    },
    /// Check every role file; exits 1 and lists every problem if there is one.
    Check,
}

fn parse_mode(value: &str) -> Result<PermissionMode, String> {
    value.parse()
}

fn parse_isolation(value: &str) -> Result<crate::isolation::Policy, String> {
    value.parse()
}

fn parse_sandbox(value: &str) -> Result<SandboxMode, String> {
    value.parse()
}

/// Reads `--max-cost`: dollars above zero.
fn parse_cost(text: &str) -> Result<f64, String> {
    match text.trim().trim_start_matches('$').parse::<f64>() {
        Ok(usd) if usd > 0.0 && usd.is_finite() => Ok(usd),
        _ => Err(format!(
            "{text:?} is not an amount in USD above 0 (write it as 0.50)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_help_text() {
        let help = Cli::command().term_width(100).render_help().to_string();
        insta::assert_snapshot!(help);
    }
}
