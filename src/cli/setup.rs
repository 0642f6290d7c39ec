//! What the flags and the configuration files set up before a run: the workspace,
//! the role catalog and the folders it came from, the models (built in
//! `providers`), the tools (Bash's confinement from `sandbox`), and the runtime's
//! configuration. It starts nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::flags::Cli;
use super::{providers, sandbox};
use crate::error::ConfigError;
use crate::models::Models;
use crate::roles::catalog::{self, Catalog};
use crate::runtime::RuntimeConfig;
use crate::tools::ToolRegistry;
use crate::tools::permissions::Approver;

/// The runtime's configuration and the run's plan, from the flags and the files.
pub(super) fn prepare(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    approver: Arc<dyn Approver>,
) -> Result<(RuntimeConfig, Plan), ConfigError> {
    let workspace = workspace(cli)?;
    let models = providers::models(cli, &workspace, env)?;
    let (bash, sandbox_notes) = sandbox::bash(cli, &providers::config_file(&workspace, env)?, env)?;
    let mut config = RuntimeConfig::new(workspace, models.default_provider());
    config.approver = approver;
    config.retry.max_attempts = cli.max_attempts.max(1);
    config.retry.base_delay = Duration::from_millis(cli.retry_base_ms);
    let (dirs, catalog) = roles(cli, &config.workspace, env);
    // A role naming an alias nobody declared would fail at its first spawn.
    if let Some(error) = catalog
        .roles()
        .find_map(|role| models.for_role(role, &models.lead()).err())
    {
        return Err(error);
    }
    Ok((
        config,
        Plan {
            models: Arc::new(models),
            catalog,
            dirs,
            tools: ToolRegistry::standard().with(bash),
            sandbox_notes,
        },
    ))
}

/// What the run needs once the runtime is up.
pub(super) struct Plan {
    pub(super) models: Arc<Models>,
    pub(super) catalog: Catalog,
    /// Where the roles came from, watched for changes during the run.
    pub(super) dirs: Vec<PathBuf>,
    /// The built-in tools, Bash confined as the flags and the user's file say.
    pub(super) tools: ToolRegistry,
    /// What this kernel does not allow of that confinement, said once at start.
    pub(super) sandbox_notes: Vec<String>,
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
