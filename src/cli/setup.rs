//! What the flags and the configuration files set up before a run: the workspace,
//! the role catalog and the folders it came from, the models (built in
//! `providers`, once `trust` lets the workspace's file send requests where it
//! says), the tools (Bash's confinement from `sandbox`), the MCP servers (those a
//! repository defines once `mcp` has the person's trust), and the runtime's
//! configuration. It starts nothing and sends nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::flags::Cli;
use super::{claude_settings, mcp_servers as mcp, providers, sandbox, trust};
use crate::error::ConfigError;
use crate::memory::Memory;
use crate::models::Models;
use crate::roles::catalog::{self, Catalog};
use crate::runtime::RuntimeConfig;
use crate::state::{Roots, StateDir};
use crate::tools::ToolRegistry;
use crate::tools::permissions::Approver;
use crate::tools::permissions::RuleSaver;
use crate::tools::rules::Rules;

/// The runtime's configuration and the run's plan, from the flags and the files;
/// asks whether to trust the workspace when its file sends requests elsewhere.
pub(super) async fn prepare(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    approver: Arc<dyn Approver>,
) -> Result<(RuntimeConfig, Plan), ConfigError> {
    let (workspace, state) = state(cli, env)?;
    let files = providers::read(&workspace, env)?;
    // A replay sends nothing anywhere: no address needs trust.
    let notes = match &cli.replay {
        Some(_) => Vec::new(),
        None => trust::check(cli.trust_workspace, &workspace, &files, approver.as_ref()).await?,
    };
    let rules = permission_rules(cli, &workspace, &files, env)?;
    let (dirs, catalog) = roles(cli, &workspace, env);
    let defined = mcp::define(&workspace, &catalog, env)?;
    let servers = mcp::trust(
        cli.trust_workspace,
        &workspace,
        defined.servers,
        &files,
        approver.as_ref(),
    )
    .await;
    if !servers.unasked.is_empty() {
        return Err(mcp::refusal(&servers.unasked));
    }
    let both = files.user.clone().merged(files.workspace.clone());
    // Only the user's own file names key variables (`api_key_env`): a repository's
    // neither adds names nor, redeclaring a provider, takes the user's away.
    let keys = files.user.key_variables();
    let (bash, sandbox_notes) = sandbox::bash(cli, &both, keys.clone(), env)?;
    let models = providers::models(cli, files, env)?;
    let mut config = RuntimeConfig::new(workspace, models.default_provider());
    config.state = Some(state.clone());
    config.approver = approver;
    let (rules, saver, rule_notes) = rules;
    config.rules = Arc::new(rules);
    config.saver = Some(saver);
    config.mcp = servers.servers;
    config.mcp_limit = mcp::start_limit(env);
    config.key_variables = keys;
    let mut notes = notes;
    notes.extend(rule_notes);
    notes.extend(defined.warnings);
    notes.extend(servers.warnings);
    config.retry.max_attempts = cli.max_attempts.max(1);
    config.retry.base_delay = Duration::from_millis(cli.retry_base_ms);
    // A role naming an alias nobody declared would fail at its first spawn.
    if let Some(error) = catalog
        .roles()
        .find_map(|role| models.for_role(role, &models.lead()).err())
    {
        return Err(error);
    }
    let memory = memory(&config.workspace, env);
    Ok((
        config,
        Plan {
            state,
            models: Arc::new(models),
            catalog,
            dirs,
            notes,
            tools: ToolRegistry::standard().with(bash),
            sandbox_notes,
            memory: Arc::new(memory),
        },
    ))
}

/// The run's permission rules: Claude Code's settings files (the workspace's
/// allow rules only in a trusted workspace) and the command line's; the saver of
/// "always" answers (a rule in `.claude/settings.local.json`, and the workspace
/// trusted in the user's file so that the next run honours it); warnings.
fn permission_rules(
    cli: &Cli,
    workspace: &Path,
    files: &providers::Files,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(Rules, RuleSaver, Vec<String>), ConfigError> {
    let home = env("HOME").map(PathBuf::from);
    let key = workspace.display().to_string();
    // A repository's allow rules count when the person says so for this run, or
    // one by one when they approved it ("always", pinned in their own file).
    let pinned = files
        .user
        .trust
        .get(&key)
        .map(|t| t.rules.clone())
        .unwrap_or_default();
    let settings = claude_settings::read(workspace, home.as_deref(), cli.trust_workspace, &pinned)?;
    let mut rules = settings.rules;
    for (list, into) in [
        (&cli.allowed_tools, &mut rules.allow),
        (&cli.disallowed_tools, &mut rules.deny),
    ] {
        let (parsed, bad) = crate::tools::rules::parse_list(list);
        if let Some(bad) = bad.first() {
            return Err(ConfigError::Invalid(format!(
                "{bad:?} is not a permission rule (write Tool or Tool(pattern), e.g. Bash(npm test:*))"
            )));
        }
        into.extend(parsed);
    }
    let local = claude_settings::local_file(workspace);
    let user_file = files.user_path.clone();
    let saver = RuleSaver(Arc::new(move |rule: &str| {
        claude_settings::save_allow_rule(&local, rule)?;
        match &user_file {
            Some(path) => super::trust::pin_rule(path, &key, rule),
            None => Ok(()),
        }
    }));
    Ok((rules, saver, settings.warnings))
}

/// The project memory of `workspace` (with `$HOME`'s).
pub(super) fn memory(workspace: &Path, env: &impl Fn(&str) -> Option<String>) -> Memory {
    let home = env("HOME").map(PathBuf::from);
    crate::memory::load(workspace, home.as_deref())
}

/// What the run needs once the runtime is up.
pub(super) struct Plan {
    /// Where the run's journals, lock and control socket go.
    pub(super) state: StateDir,
    pub(super) models: Arc<Models>,
    pub(super) catalog: Catalog,
    /// Where the roles came from, watched for changes during the run.
    pub(super) dirs: Vec<PathBuf>,
    /// Warnings to show before the run starts.
    pub(super) notes: Vec<String>,
    /// The built-in tools, Bash confined as the flags and the user's file say.
    pub(super) tools: ToolRegistry,
    /// What this kernel does not allow of that confinement, said once at start.
    pub(super) sandbox_notes: Vec<String>,
    /// `CLAUDE.md`, `AGENTS.md` and the like, for every agent's system prompt.
    pub(super) memory: Arc<Memory>,
}

/// The workspace (`-C DIR`, else the current directory), made canonical; a bad
/// `--agents-dir` is refused here too, before anything is read.
pub(super) fn workspace(cli: &Cli) -> Result<PathBuf, ConfigError> {
    if let Some(dir) = &cli.agents_dir
        && !dir.is_dir()
    {
        return Err(ConfigError::AgentsDir {
            path: dir.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    let dir = match &cli.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().map_err(|e| ConfigError::Workspace {
            path: ".".into(),
            reason: e.to_string(),
        })?,
    };
    let dir = dir.canonicalize().map_err(|e| ConfigError::Workspace {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    if !dir.is_dir() {
        return Err(ConfigError::Workspace {
            path: dir.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(dir)
}

/// The workspace (as [`workspace`] finds it) and its state folder under the XDG
/// folders `env` names.
pub(super) fn state(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(PathBuf, StateDir), ConfigError> {
    let workspace = workspace(cli)?;
    let roots = Roots::from_env(env).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    let state = roots.workspace(&workspace);
    Ok((workspace, state))
}

/// Says, in one line, that a `.orchestrate` folder in the workspace (shipped by
/// a repository, or left by an older orchestrate) is neither read nor written.
pub(super) fn warn_of_old_state(workspace: &Path, err: &mut dyn std::io::Write) {
    let old = workspace.join(".orchestrate");
    if std::fs::symlink_metadata(&old).is_ok() {
        let _ = writeln!(
            err,
            "orchestrate: warning: {} is ignored: runs are kept in the state folder, out of the workspace",
            old.display()
        );
    }
}

/// The role folders searched for `workspace` (with `--agents-dir` and `$HOME`),
/// and the roles found in them.
pub(super) fn roles(
    cli: &Cli,
    workspace: &Path,
    env: &impl Fn(&str) -> Option<String>,
) -> (Vec<PathBuf>, Catalog) {
    let home = env("HOME").map(PathBuf::from);
    let dirs = catalog::search_dirs(workspace, home.as_deref(), cli.agents_dir.as_deref());
    let catalog = Catalog::load(&dirs);
    (dirs, catalog)
}
