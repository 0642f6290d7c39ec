//! A run's workers on other machines (`--nats`): the link to them, made
//! before the lead starts, and the launcher that places its Task calls.

use std::sync::Arc;

use crate::protocol::SessionId;
use crate::remote::launcher::{Placing, RemoteLauncher};
use crate::remote::lead::Remote;
use crate::runtime::Handle;
use crate::setup::Setup;
use crate::task::Launcher;

use super::flags::Cli;

/// A run's launcher, its link to the servers, and what to tell the person.
pub(super) type Placed = (Arc<dyn Launcher>, Arc<Remote>, Option<String>);

/// The launcher of run `run`'s Task calls when it has `--nats`, its link to
/// the servers (to clean up after it with [`Remote::finish`]) and, when a
/// server is elsewhere, a note naming the key workers there must trust;
/// `None` without. The link is made now: servers that cannot be joined end the run
/// before it starts, in one line.
pub(super) async fn launcher(
    cli: &Cli,
    env: &impl Fn(&str) -> Option<String>,
    plan: &Setup,
    handle: Handle,
    run: SessionId,
) -> Result<Option<Placed>, String> {
    let Some(urls) = cli.nats.as_ref().or(plan.nats.as_ref()) else {
        if cli.remote_only {
            return Err("--remote-only needs workers: give --nats URLS, or `nats` in ~/.config/orchestrate/config.toml".into());
        }
        return Ok(None);
    };
    let auth = crate::remote::auth::Auth::from_env(env).map_err(|why| format!("--nats: {why}"))?;
    let servers = crate::remote::subjects::servers(urls, auth.proves())
        .map_err(|why| format!("--nats {why}"))?;
    let key = crate::remote::lead_key(plan.state.root()).map_err(|e| format!("--nats: {e}"))?;
    let public = key.public_key();
    let note = (!servers.iter().all(|s| crate::remote::subjects::on_this_machine(s))).then(|| {
        format!("tasks are signed with lead key {public}: a worker on another machine runs them with --trust-lead {public}")
    });
    // The run's hooks that fire for sub-agents: workers are told when, and
    // ask this machine to run them.
    let hooks = plan.hooks.shape();
    let asked = (!hooks.is_empty()).then(|| plan.hooks.clone());
    let remote = Remote::join(&servers, &auth, run, key, asked)
        .await
        .map_err(|e| format!("--nats: {e}"))?;
    let remote = Arc::new(remote);
    let rules = |list: &[crate::tools::rules::Rule]| list.iter().map(ToString::to_string).collect();
    // This machine runs as many sub-agents at once as it has cores before
    // `any` ones go to workers.
    let room = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let placing = Placing {
        remote_only: cli.remote_only,
        room,
        deny: rules(&plan.rules.deny),
        ask: rules(&plan.rules.ask),
        hooks,
    };
    let launcher = RemoteLauncher::new(handle, remote.clone(), placing);
    Ok(Some((Arc::new(launcher), remote, note)))
}
