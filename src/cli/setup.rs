//! What the flags set up before a run: the workspace and its state folder, then
//! the run's setup from every source ([`crate::setup`]), asking the person what
//! only they may allow (`trust`). It starts nothing and sends nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::flags::Cli;
use super::trust;
use crate::error::ConfigError;
use crate::runtime::RuntimeConfig;
use crate::setup::{self, Options, Setup};
use crate::state::{Roots, StateDir};
use crate::tools::permissions::Approver;

/// The runtime's configuration and the run's setup, from the flags and every
/// source; asks the person what needs their yes.
pub(super) async fn prepare(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    approver: Arc<dyn Approver>,
) -> Result<(RuntimeConfig, Setup), ConfigError> {
    let (workspace, state) = state(cli, env)?;
    let prepared = setup::prepare(&workspace, state, options(cli), env)?;
    let answers = trust::ask(prepared.questions(), approver.as_ref()).await;
    let setup = prepared.finish(&answers, env)?;
    let mut config = setup.runtime_config(approver);
    config.approval_timeout = cli.approval_timeout;
    Ok((config, setup))
}

/// What of the flags the setup needs.
pub(super) fn options(cli: &Cli) -> Options {
    Options {
        trust_workspace: cli.trust_workspace,
        agents_dir: cli.agents_dir.clone(),
        provider: cli.provider.clone(),
        base_url: cli.base_url.clone(),
        model: cli.model.clone(),
        fallback_model: cli.fallback_model.clone(),
        record: cli.record.clone(),
        replay: cli.replay.clone(),
        replay_lenient: cli.replay_lenient,
        allowed_tools: cli.allowed_tools.clone(),
        disallowed_tools: cli.disallowed_tools.clone(),
        sandbox: cli.sandbox,
        idle_timeout: Duration::from_secs(cli.idle_timeout.max(1)),
        max_parallel: cli.max_parallel,
        max_depth: cli.max_depth,
        max_attempts: cli.max_attempts,
        retry_base: Duration::from_millis(cli.retry_base_ms),
    }
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
    let invalid = |e: crate::state::StateError| ConfigError::Invalid(e.to_string());
    let state = Roots::from_env(env).map_err(invalid)?.workspace(&workspace);
    // Nothing is read through a state folder that is not a safe one.
    state.check().map_err(invalid)?;
    Ok((workspace, state))
}

/// [`state`], or `None` once its error is said on `err` in one line.
pub(super) fn state_or_say(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    err: &mut dyn std::io::Write,
) -> Option<(PathBuf, StateDir)> {
    match state(cli, env) {
        Ok(found) => Some(found),
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            None
        }
    }
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::trust::person::Person;
    use super::*;
    use crate::config::ConfigFile;
    use crate::ui;

    /// A workspace whose file sends requests to its own address and starts an
    /// MCP server, and a home folder of its own.
    fn places() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        std::fs::write(
            ws_path.join("orchestrate.toml"),
            "[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n",
        )
        .unwrap();
        std::fs::write(
            ws_path.join(".mcp.json"),
            r#"{"mcpServers": {"repo": {"command": "srv", "args": ["-x"]}}}"#,
        )
        .unwrap();
        (home, ws, ws_path)
    }

    async fn run(
        home: &Path,
        ws: &Path,
        flags: &[&str],
        person: &Person,
    ) -> Result<Setup, ConfigError> {
        let home_text = home.display().to_string();
        let env = move |k: &str| match k {
            "HOME" => Some(home_text.clone()),
            "OPENAI_API_KEY" => Some("k".into()),
            _ => None,
        };
        let mut args = vec!["orchestrate", "-C", ws.to_str().unwrap(), "--model", "m"];
        args.extend_from_slice(flags);
        args.push("task");
        let cli = Cli::parse_from(args);
        let (workspace, state) = state(&cli, &env)?;
        let prepared = setup::prepare(&workspace, state, options(&cli), &env)?;
        let answers = trust::ask(prepared.questions(), person).await;
        prepared.finish(&answers, &env)
    }

    fn user_file(home: &Path) -> ConfigFile {
        let text = std::fs::read_to_string(home.join(".config/orchestrate/config.toml"))
            .unwrap_or_default();
        ConfigFile::parse("config.toml", &text).unwrap()
    }

    #[tokio::test]
    async fn a_yes_is_remembered_a_no_is_not_and_nobody_to_ask_ends_the_run() {
        let (home, _ws, ws) = places();
        let key = ws.display().to_string();
        // Nobody to ask: refused, naming the flag; nothing remembered.
        let nobody = Person::new(None);
        let refused = run(home.path(), &ws, &[], &nobody).await.unwrap_err();
        assert!(matches!(
            refused,
            ConfigError::Untrusted {
                declined: false,
                ..
            }
        ));
        assert!(
            refused.to_string().contains("--trust-workspace"),
            "{refused}"
        );
        // A no to the address: refused; the address was shown, nothing after it asked.
        let no = Person::new(Some(false));
        let refused = run(home.path(), &ws, &[], &no).await.unwrap_err();
        assert!(matches!(
            refused,
            ConfigError::Untrusted { declined: true, .. }
        ));
        let shown = no.shown.lock().unwrap().clone();
        assert_eq!(shown.len(), 1);
        assert!(shown[0].contains("http://127.0.0.1:9/v1"), "{}", shown[0]);
        assert!(!home.path().join(".config/orchestrate/config.toml").exists());
        // A yes: both remembered; the next run asks nothing.
        let yes = Person::new(Some(true));
        let setup = run(home.path(), &ws, &[], &yes).await.unwrap();
        assert_eq!(setup.servers.len(), 1);
        assert_eq!(yes.shown.lock().unwrap().len(), 2);
        let user = user_file(home.path());
        assert!(user.trusts(&key, "http://127.0.0.1:9/v1"));
        assert!(user.trusts_mcp(&key, "repo: srv -x"));
        let again = Person::new(None);
        let setup = run(home.path(), &ws, &[], &again).await.unwrap();
        assert_eq!(setup.servers.len(), 1);
        assert!(again.shown.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_no_to_a_server_leaves_it_out_and_the_flag_trusts_without_asking() {
        let (home, _ws, ws) = places();
        let key = ws.display().to_string();
        std::fs::create_dir_all(home.path().join(".config/orchestrate")).unwrap();
        std::fs::write(
            home.path().join(".config/orchestrate/config.toml"),
            crate::config::remember("", &key, &["http://127.0.0.1:9/v1"]).unwrap(),
        )
        .unwrap();
        let no = Person::new(Some(false));
        let setup = run(home.path(), &ws, &[], &no).await.unwrap();
        assert!(setup.servers.is_empty());
        assert_eq!(
            setup.notes,
            ["MCP servers repo are not started: this workspace is not trusted to start them"]
        );
        let questions = no.shown.lock().unwrap().clone();
        let servers = setup::prepare(
            &ws,
            StateDir::at(home.path(), &ws),
            Options::default(),
            &|k: &str| (k == "HOME").then(|| home.path().display().to_string()),
        )
        .unwrap()
        .servers()
        .1
        .unwrap()
        .to_vec();
        assert_eq!(questions, [ui::trust::mcp_question(&servers)]);
        // The flag: trusted, asked nothing, remembered.
        let other = tempfile::tempdir().unwrap();
        let unasked = Person::new(None);
        let setup = run(other.path(), &ws, &["--trust-workspace"], &unasked)
            .await
            .unwrap();
        assert_eq!(setup.servers.len(), 1);
        assert!(unasked.shown.lock().unwrap().is_empty());
        let user = user_file(other.path());
        assert!(user.trusts(&key, "http://127.0.0.1:9/v1"));
        assert!(user.trusts_mcp(&key, "repo: srv -x"));
    }
}
