//! How a run is set up, from every place that configures it: the person's files
//! (`~/.config/orchestrate/config.toml` and `mcp.json`, `~/.claude/settings.json`,
//! their roles and memory), the workspace's (`orchestrate.toml`,
//! `.claude/settings*.json`, `.mcp.json`, its roles and memory files), the command
//! line and the environment.
//!
//! Every file is read once ([`Sources`]), each keeps whose it is ([`Origin`]), and
//! one trust rule ([`rule::verdict`]) decides what a workspace's files may set:
//! freely, only to be stricter (`limits`: prices, windows, compaction; deny and
//! ask rules), only once the person trusts the workspace with it (addresses,
//! allow rules, MCP servers), or never (`[trust]`, `[sandbox]`, `api_key_env`).
//!
//! Nobody is asked here: [`prepare`] returns what needs the person's yes as
//! [`Question`]s, the CLI asks them, and [`Prepared::finish`] takes the answers
//! (remembering a yes in the person's file) and builds the run's [`Setup`].

pub mod rule;

mod approval;
mod hooks;
mod limits;
mod permissions;
mod providers;
pub(crate) mod remember;
mod sandbox;
mod servers;
mod sources;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use self::rule::{Origin, Rule, Setting, Verdict};
pub use self::sources::{Sources, Text, roles};
use crate::config::{self, ConfigFile, Redirect};
use crate::error::ConfigError;
use crate::mcp::ServerConfig;
use crate::memory::Memory;
use crate::models::Models;
use crate::roles::catalog::Catalog;
use crate::runtime::RuntimeConfig;
use crate::state::StateDir;
use crate::tools::ToolRegistry;
use crate::tools::bash::SandboxMode;
use crate::tools::permissions::{Approver, RuleSaver};
use crate::tools::rules::Rules;

/// What the command line says, of what setting a run up needs.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--trust-workspace`: the workspace is trusted with everything it asks for.
    pub trust_workspace: bool,
    /// `--agents-dir`.
    pub agents_dir: Option<PathBuf>,
    /// `--provider`.
    pub provider: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--fallback-model`.
    pub fallback_model: Option<String>,
    /// `--record`.
    pub record: Option<PathBuf>,
    /// `--replay`.
    pub replay: Option<PathBuf>,
    /// `--replay-lenient`.
    pub replay_lenient: bool,
    /// `--allowedTools`.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools`.
    pub disallowed_tools: Vec<String>,
    /// `--sandbox`.
    pub sandbox: Option<SandboxMode>,
    /// `--idle-timeout`.
    pub idle_timeout: Duration,
    /// `--max-parallel`.
    pub max_parallel: usize,
    /// `--max-depth`.
    pub max_depth: u32,
    /// `--max-attempts`.
    pub max_attempts: u32,
    /// The first retry's backoff.
    pub retry_base: Duration,
}

/// Something only the person may allow.
#[derive(Clone, Debug, PartialEq)]
pub enum Question {
    /// The workspace's `file` sends model requests to addresses of its own; a
    /// no (or nobody to ask) ends the run before any request.
    Addresses {
        /// The file.
        file: String,
        /// Where it sends them.
        redirects: Vec<Redirect>,
    },
    /// The workspace starts MCP servers; a no leaves them out, nobody to ask
    /// ends the run.
    Servers(Vec<ServerConfig>),
}

/// A run's setup before the person's answers.
#[derive(Debug)]
pub struct Prepared {
    sources: Sources,
    state: StateDir,
    options: Options,
    /// The configuration as the rule left it (the workspace's over the user's).
    file: ConfigFile,
    rules: Rules,
    /// The hooks to run.
    hooks: Arc<crate::hooks::Hooks>,
    /// Every server defined, in order.
    defined: Vec<ServerConfig>,
    /// Those that may start as things stand.
    servers: Vec<ServerConfig>,
    questions: Vec<Question>,
    notes: Vec<String>,
}

/// Everything a run is set up with.
#[derive(Debug)]
pub struct Setup {
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// Where the run's journals, lock and control socket go.
    pub state: StateDir,
    /// The providers and models.
    pub models: Arc<Models>,
    /// The roles.
    pub catalog: Catalog,
    /// Where the roles came from, watched for changes during the run.
    pub role_dirs: Vec<PathBuf>,
    /// `CLAUDE.md`, `AGENTS.md` and the like, for every agent's system prompt.
    pub memory: Arc<Memory>,
    /// The built-in tools, Bash confined as the flags and the user's file say.
    pub tools: ToolRegistry,
    /// The permission rules of every source.
    pub rules: Rules,
    /// The hooks to run (Claude Code's, from the settings files).
    pub hooks: Arc<crate::hooks::Hooks>,
    /// The skills (Claude Code's).
    pub skills: Arc<crate::skills::Skills>,
    /// Where an "always" answer is saved.
    pub saver: RuleSaver,
    /// The MCP servers that may start.
    pub servers: Vec<ServerConfig>,
    /// How long an MCP server may take to start.
    pub mcp_limit: Duration,
    /// The variables that hold provider keys besides the built-in names.
    pub key_variables: Vec<String>,
    /// What the person should know before the run starts, one line each.
    pub notes: Vec<String>,
    /// What this kernel does not allow of Bash's confinement, said once.
    pub sandbox_notes: Vec<String>,
    /// A run's first prompt gets a title (`titles = true` in the user's file).
    pub titles: bool,
    /// Who answers permission questions instead of the terminal
    /// (`[approval]` in the user's file).
    pub forwarder: Option<Arc<dyn Approver>>,
    /// The NATS servers whose workers may run sub-agents (`nats` in the
    /// user's file; `--nats` wins).
    pub nats: Option<String>,
    /// The leads whose tasks a worker runs (`trust_leads` in the user's
    /// file), beside `--trust-lead`.
    pub trust_leads: Vec<String>,
    options: Options,
}

impl Setup {
    /// The runtime's configuration; `approver` answers permission questions.
    pub fn runtime_config(&self, approver: Arc<dyn Approver>) -> RuntimeConfig {
        let mut config = RuntimeConfig::new(self.workspace.clone(), self.models.default_provider());
        config.state = Some(self.state.clone());
        config.approver = self.forwarder.clone().unwrap_or(approver);
        config.rules = Arc::new(self.rules.clone());
        config.hooks = self.hooks.clone();
        config.read_roots = self.skills.roots().to_vec();
        config.saver = Some(self.saver.clone());
        config.mcp = self.servers.clone();
        config.mcp_limit = self.mcp_limit;
        config.key_variables = self.key_variables.clone();
        config.retry.max_attempts = self.options.max_attempts.max(1);
        config.retry.base_delay = self.options.retry_base;
        config
    }
}

/// Reads every source of `workspace` (canonical) and applies the trust rule:
/// what a workspace's file may never set is an error; what it may set only
/// stricter is kept where it is, else left out with a note; what needs the
/// person's trust comes back as questions.
pub fn prepare(
    workspace: &Path,
    state: StateDir,
    options: Options,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Prepared, ConfigError> {
    let sources = Sources::read(workspace, options.agents_dir.as_deref(), env)?;
    refuse_user_only(&sources.repository.file, &sources.repository.path)?;
    let key = workspace.display().to_string();
    let (user, repository) = (&sources.user.file, &sources.repository.file);
    let mut notes = sources.notes.clone();
    let mut questions = Vec::new();
    // A replay sends nothing anywhere: no address needs trust.
    let redirects: Vec<Redirect> = config::redirects(repository)
        .into_iter()
        .filter(|r| {
            let trusted = options.trust_workspace || user.trusts(&key, &r.base_url);
            let asks = rule::verdict(Setting::ProviderAddress, Origin::Workspace, trusted);
            options.replay.is_none() && asks == Verdict::Ask
        })
        .collect();
    if !redirects.is_empty() {
        questions.push(Question::Addresses {
            file: sources.repository.path.display().to_string(),
            redirects,
        });
    }
    let pinned = user
        .trust
        .get(&key)
        .map(|t| t.rules.clone())
        .unwrap_or_default();
    let settings = permissions::read(
        workspace,
        sources.home.as_deref(),
        &sources.settings,
        options.trust_workspace,
        &pinned,
    )?;
    let mut rules = settings.rules;
    notes.extend(settings.warnings);
    let (hooks, hook_notes) = hooks::read(&sources.settings, workspace, options.trust_workspace)?;
    let hooks = Arc::new(hooks);
    notes.extend(hook_notes);
    for (list, into) in [
        (&options.allowed_tools, &mut rules.allow),
        (&options.disallowed_tools, &mut rules.deny),
    ] {
        let (parsed, bad) = crate::tools::rules::parse_list(list);
        if let Some(bad) = bad.first() {
            return Err(ConfigError::Invalid(format!(
                "{bad:?} is not a permission rule (write Tool or Tool(pattern), e.g. Bash(npm test:*))"
            )));
        }
        into.extend(parsed);
    }
    let defined = servers::define(&sources, env)?;
    notes.extend(defined.warnings);
    let (servers, untrusted) = servers::partition(
        options.trust_workspace,
        workspace,
        defined.servers.clone(),
        user,
    );
    if !untrusted.is_empty() {
        questions.push(Question::Servers(untrusted));
    }
    let limits = limits::merge(user, repository, &sources.repository.path);
    notes.extend(limits.warnings);
    let mut file = user.clone().merged(repository.clone());
    file.model_info = limits.model_info;
    file.compaction = limits.compact_at.map(|threshold| config::CompactionEntry {
        threshold: Some(threshold),
    });
    Ok(Prepared {
        sources,
        state,
        options,
        file,
        rules,
        hooks,
        defined: defined.servers,
        servers,
        questions,
        notes,
    })
}

/// Refuses what only the person's own file may set, found in the workspace's
/// file at `path`.
fn refuse_user_only(repository: &ConfigFile, path: &Path) -> Result<(), ConfigError> {
    let refused = |setting| rule::verdict(setting, Origin::Workspace, false) == Verdict::Refuse;
    let file = path.display();
    if !repository.trust.is_empty() && refused(Setting::Trust) {
        return Err(ConfigError::Invalid(format!(
            "{file}: [trust] is honoured only in ~/.config/orchestrate/config.toml (a repository cannot trust itself)"
        )));
    }
    if repository.sandbox.is_some() && refused(Setting::Sandbox) {
        return Err(ConfigError::Invalid(format!(
            "{file}: [sandbox] is honoured only in ~/.config/orchestrate/config.toml (a repository's orchestrate.toml must not loosen the sandbox)"
        )));
    }
    if !repository.trust_leads.is_empty() && refused(Setting::Nats) {
        return Err(ConfigError::Invalid(format!(
            "{file}: trust_leads is honoured only in ~/.config/orchestrate/config.toml (a repository must not choose whose tasks run on this machine)"
        )));
    }
    if repository.nats.is_some() && refused(Setting::Nats) {
        return Err(ConfigError::Invalid(format!(
            "{file}: nats is honoured only in ~/.config/orchestrate/config.toml (a repository must not send its tasks to other machines)"
        )));
    }
    if repository.approval.is_some() && refused(Setting::Approval) {
        return Err(ConfigError::Invalid(format!(
            "{file}: [approval] is honoured only in ~/.config/orchestrate/config.toml (a repository must not choose who answers permission questions)"
        )));
    }
    if let Some((name, _)) = repository
        .providers
        .iter()
        .find(|(_, p)| p.api_key_env.is_some())
        && refused(Setting::KeyVariable)
    {
        return Err(ConfigError::Invalid(format!(
            "{file}: provider {name:?}: api_key_env is honoured only in ~/.config/orchestrate/config.toml (a repository's orchestrate.toml must not choose which secret is sent where)"
        )));
    }
    Ok(())
}

impl Prepared {
    /// What needs the person's yes, in the order to ask it.
    pub fn questions(&self) -> &[Question] {
        &self.questions
    }

    /// The workspace.
    pub fn workspace(&self) -> &Path {
        &self.sources.workspace
    }

    /// The sources as read.
    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// The MCP servers that may start as things stand, and those asked about.
    pub fn servers(&self) -> (&[ServerConfig], Option<&[ServerConfig]>) {
        let asked = self.questions.iter().find_map(|q| match q {
            Question::Servers(servers) => Some(servers.as_slice()),
            Question::Addresses { .. } => None,
        });
        (&self.servers, asked)
    }

    /// For `orchestrate mcp list`: every server defined, in order, and those that
    /// may start given `answer`, the person's to the servers question (a yes
    /// remembered, a no noted). What else needs a yes is not asked.
    pub fn servers_answered(
        &mut self,
        answer: Option<bool>,
    ) -> (Vec<ServerConfig>, Vec<ServerConfig>) {
        let asked: Vec<ServerConfig> = self
            .servers()
            .1
            .map(<[ServerConfig]>::to_vec)
            .unwrap_or_default();
        let all = self.defined.clone();
        let mut starting = self.servers.clone();
        if asked.is_empty() {
            return (all, starting);
        }
        let key = self.sources.workspace.display().to_string();
        let user_file = self.sources.user_file().map(Path::to_owned);
        match answer {
            Some(true) => {
                let keys: Vec<String> = asked.iter().map(ServerConfig::trust_key).collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                self.notes
                    .extend(remember::remembered(user_file.as_deref(), |text| {
                        config::trust_mcp(text, &key, &keys)
                    }));
                starting.extend(asked);
            }
            Some(false) => self.notes.push(servers::declined(&asked)),
            None => {}
        }
        (all, starting)
    }

    /// What the person should know so far, one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// How long an MCP server may take to start.
    pub fn mcp_limit(env: &impl Fn(&str) -> Option<String>) -> Duration {
        servers::start_limit(env)
    }

    /// The variables that hold provider keys besides the built-in names: only
    /// the person's own file names them.
    pub fn key_variables(&self) -> Vec<String> {
        self.sources.user.file.key_variables()
    }

    /// The setup, given the person's answers to [`Prepared::questions`], in
    /// order (`None`: nobody could be asked). A yes is remembered in the
    /// person's file (a note says so when it cannot be).
    pub fn finish(
        mut self,
        answers: &[Option<bool>],
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Setup, ConfigError> {
        let key = self.sources.workspace.display().to_string();
        let user_file = self.sources.user_file().map(Path::to_owned);
        for (question, answer) in std::mem::take(&mut self.questions)
            .into_iter()
            .zip(answers.iter().copied().chain(std::iter::repeat(None)))
        {
            match (question, answer) {
                (Question::Addresses { redirects, .. }, Some(true)) => {
                    let urls: Vec<&str> = redirects.iter().map(|r| r.base_url.as_str()).collect();
                    self.notes
                        .extend(remember::remembered(user_file.as_deref(), |text| {
                            config::remember(text, &key, &urls)
                        }));
                }
                (Question::Addresses { file, redirects }, answer) => {
                    let targets: Vec<String> = redirects
                        .iter()
                        .map(|r| format!("{:?} (provider {:?})", r.base_url, r.provider))
                        .collect();
                    return Err(ConfigError::Untrusted {
                        file,
                        targets: targets.join(", "),
                        declined: answer.is_some(),
                    });
                }
                (Question::Servers(servers), Some(true)) => {
                    let keys: Vec<String> = servers.iter().map(ServerConfig::trust_key).collect();
                    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                    self.notes
                        .extend(remember::remembered(user_file.as_deref(), |text| {
                            config::trust_mcp(text, &key, &keys)
                        }));
                    self.servers.extend(servers);
                }
                (Question::Servers(servers), Some(false)) => {
                    self.notes.push(servers::declined(&servers));
                }
                (Question::Servers(servers), None) => return Err(servers::refusal(&servers)),
            }
        }
        // The remembered trust is written before the flags' trust counts again:
        // with `--trust-workspace` every question was answered yes already.
        if self.options.trust_workspace {
            self.remember_flagged(&key, user_file.as_deref());
        }
        self.build(env)
    }

    /// Under `--trust-workspace`, remembers the addresses and servers it
    /// trusted, as a yes would be.
    fn remember_flagged(&mut self, key: &str, user_file: Option<&Path>) {
        let user = &self.sources.user.file;
        let urls: Vec<String> = config::redirects(&self.sources.repository.file)
            .into_iter()
            .filter(|r| !user.trusts(key, &r.base_url))
            .map(|r| r.base_url)
            .collect();
        if !urls.is_empty() && self.options.replay.is_none() {
            let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
            self.notes.extend(remember::remembered(user_file, |text| {
                config::remember(text, key, &urls)
            }));
        }
        let servers: Vec<String> = self
            .servers
            .iter()
            .filter(|s| s.origin.needs_trust() && !user.trusts_mcp(key, &s.trust_key()))
            .map(ServerConfig::trust_key)
            .collect();
        if !servers.is_empty() {
            let servers: Vec<&str> = servers.iter().map(String::as_str).collect();
            self.notes.extend(remember::remembered(user_file, |text| {
                config::trust_mcp(text, key, &servers)
            }));
        }
    }

    /// Builds the run's setup once every question is answered.
    fn build(self, env: &impl Fn(&str) -> Option<String>) -> Result<Setup, ConfigError> {
        let Self {
            sources,
            state,
            options,
            file,
            rules,
            hooks,
            servers,
            mut notes,
            ..
        } = self;
        let (skills, skill_notes) =
            crate::skills::Skills::load(&sources.workspace, sources.home.as_deref());
        notes.extend(skill_notes);
        let (skills, skill_notes) = skills.without_unusable(crate::tools::skill::unusable);
        notes.extend(skill_notes);
        let skills = Arc::new(skills);
        // Only the user's own file names key variables (`api_key_env`): a
        // repository's neither adds names nor, redeclaring a provider, takes the
        // user's away.
        let keys = sources.user.file.key_variables();
        let (bash, sandbox_notes) =
            sandbox::bash(options.sandbox, &sources.user.file, keys.clone(), env)?;
        let models = providers::models(&options, &file, env)?;
        // A role naming an alias nobody declared would fail at its first spawn.
        // A fallback naming one fails at start too, not when first needed.
        for role in sources.catalog.roles() {
            let model = models.for_role(role, &models.lead())?;
            if let Some(name) = role
                .fallback_model
                .as_ref()
                .or(options.fallback_model.as_ref())
            {
                models.fallback(name, &model, &role.source)?;
            }
        }
        let titles = sources.user.file.titles == Some(true);
        let forwarder = approval::forwarder(&sources.user.file)?;
        let nats = sources.user.file.nats.clone();
        let trust_leads = sources.user.file.trust_leads.clone();
        let workspace = sources.workspace.clone();
        let local = permissions::local_file(&workspace);
        let user_file = sources.user_file().map(Path::to_owned);
        let key = workspace.display().to_string();
        let saver = RuleSaver(Arc::new(move |rule: &str| {
            permissions::save_allow_rule(&local, rule)?;
            match &user_file {
                Some(path) => remember::pin_rule(path, &key, rule),
                None => Ok(()),
            }
        }));
        Ok(Setup {
            workspace,
            state,
            models: Arc::new(models),
            catalog: sources.catalog,
            role_dirs: sources.role_dirs,
            memory: Arc::new(sources.memory),
            tools: match skills.is_empty() {
                true => ToolRegistry::standard().with(bash),
                false => (ToolRegistry::standard().with(bash))
                    .with(crate::tools::skill::Skill::new(skills.clone())),
            },
            rules,
            hooks,
            skills,
            saver,
            servers,
            mcp_limit: servers::start_limit(env),
            key_variables: keys,
            notes,
            sandbox_notes,
            titles,
            forwarder,
            nats,
            trust_leads,
            options,
        })
    }
}
