//! A message sent to an agent from another terminal (`orchestrate steer`) is
//! the person's prompt, so it goes through the run's `UserPromptSubmit`
//! hooks as the first prompt does: a hook that blocks keeps it from the
//! agent (told as the agent's `hook_ran` event, kept in its journal), and
//! what the hooks add joins it. The hooks run after the request is answered,
//! as they may take longer than a request may.

use std::path::PathBuf;
use std::sync::Arc;

use crate::hooks::{HookEvent, Hooks, Place};
use crate::runtime::Handle;
use crate::state::StateDir;
use crate::ui::progress::Row;

/// The run's `UserPromptSubmit` hooks, for messages from other terminals.
#[derive(Debug)]
pub struct PromptHooks {
    hooks: Arc<Hooks>,
    /// The hooks' working directory.
    cwd: PathBuf,
    /// Where the agents' journals are (the hooks' `transcript_path`).
    state: StateDir,
    /// The run's permission mode, as the hooks' input names it.
    permission_mode: String,
}

impl PromptHooks {
    /// The `UserPromptSubmit` hooks of `hooks`, run in `cwd`; `None` when
    /// there are none.
    pub fn new(
        hooks: Arc<Hooks>,
        cwd: PathBuf,
        state: StateDir,
        permission_mode: &str,
    ) -> Option<Arc<Self>> {
        hooks.has(HookEvent::UserPromptSubmit).then(|| {
            Arc::new(Self {
                hooks,
                cwd,
                state,
                permission_mode: permission_mode.to_owned(),
            })
        })
    }

    /// Sends `message` to the agent of `row` once its hooks allow it.
    pub(super) fn steer(self: &Arc<Self>, handle: &Handle, row: &Row, message: String) {
        let (this, handle) = (self.clone(), handle.clone());
        let (session, parent, role) = (row.session, row.parent, row.role.clone());
        tokio::spawn(async move {
            let place = Place {
                session: session.to_string(),
                cwd: this.cwd.clone(),
                transcript: Some(this.state.journal(session)),
                permission_mode: this.permission_mode.clone(),
            };
            let publisher = handle.journaling_publisher(session, parent, &role);
            let tell = |kind| publisher.publish(kind);
            let fields = serde_json::json!({ "prompt": message });
            let event = HookEvent::UserPromptSubmit;
            let answer = this.hooks.fire(event, None, &place, fields, tell).await;
            if answer.block.is_none() && answer.stop.is_none() {
                handle.steer(
                    session,
                    crate::hooks::with_context(message, &answer.context),
                );
            }
        });
    }
}
