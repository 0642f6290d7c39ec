//! A message sent to an agent from another terminal (`orchestrate steer`) is
//! the person's prompt, so it goes through the run's `UserPromptSubmit`
//! hooks as the first prompt does: a hook that blocks keeps it from the
//! agent (told as the agent's `hook_ran` event, kept in its journal), and
//! what the hooks add joins it. The hooks run after the request is answered,
//! as they may take longer than a request may, one message at a time in the
//! order they came, so two messages reach an agent in the order they were
//! sent.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::actors::AbortOnDrop;
use crate::hooks::{HookEvent, Hooks, Place};
use crate::protocol::SessionId;
use crate::runtime::Handle;
use crate::ui::progress::Row;

/// The run's `UserPromptSubmit` hooks, for messages from other terminals.
#[derive(Debug)]
pub struct PromptHooks {
    /// Where messages wait for their hooks.
    messages: mpsc::UnboundedSender<Message>,
    /// Runs the hooks of each message in turn; ends with this.
    _worker: AbortOnDrop,
}

/// A message for an agent, waiting for its hooks.
#[derive(Debug)]
struct Message {
    session: SessionId,
    parent: Option<SessionId>,
    role: String,
    text: String,
}

/// What the hooks of each message run with.
struct Runner {
    hooks: Arc<Hooks>,
    /// The hooks' working directory.
    cwd: PathBuf,
    /// The run's permission mode, as the hooks' input names it.
    permission_mode: String,
    handle: Handle,
}

impl PromptHooks {
    /// The `UserPromptSubmit` hooks of `hooks`, run in `cwd`, for the run of
    /// `handle` (whose journals are their `transcript_path`); `None` when
    /// there are none.
    pub fn new(
        hooks: Arc<Hooks>,
        cwd: PathBuf,
        permission_mode: &str,
        handle: Handle,
    ) -> Option<Self> {
        if !hooks.has(HookEvent::UserPromptSubmit) {
            return None;
        }
        let runner = Runner {
            hooks,
            cwd,
            permission_mode: permission_mode.to_owned(),
            handle,
        };
        let (messages, mut waiting) = mpsc::unbounded_channel::<Message>();
        let worker = tokio::spawn(async move {
            while let Some(message) = waiting.recv().await {
                runner.submit(message).await;
            }
        });
        Some(Self {
            messages,
            _worker: AbortOnDrop(worker),
        })
    }

    /// Sends `text` to the agent of `row` once its hooks allow it.
    pub(super) fn steer(&self, row: &Row, text: String) {
        let _ = self.messages.send(Message {
            session: row.session,
            parent: row.parent,
            role: row.role.clone(),
            text,
        });
    }
}

impl Runner {
    /// Runs the hooks of `message`, then sends it on with what they added,
    /// unless they refused it.
    async fn submit(&self, message: Message) {
        let journal = self.handle.journal_path(message.session);
        // Kept in the agent's journal once it has one (a message for an
        // agent that has not started yet has none to go to).
        let journaled = journal.is_file();
        let place = Place {
            session: message.session.to_string(),
            cwd: self.cwd.clone(),
            transcript: Some(journal),
            permission_mode: self.permission_mode.clone(),
        };
        let publisher = match journaled {
            true => {
                (self.handle).journaling_publisher(message.session, message.parent, &message.role)
            }
            false => (self.handle).publisher(message.session, message.parent, &message.role),
        };
        let tell = |kind| publisher.publish(kind);
        let submitted = self.hooks.submit(&place, &message.text, tell).await;
        if let Ok(context) = submitted {
            let text = crate::hooks::with_context(message.text, &context);
            self.handle.steer(message.session, text);
        }
    }
}
