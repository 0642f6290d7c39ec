//! An interactive session: `orchestrate` with no task at a terminal. Each line
//! the person types is a task, then a follow-up in the same conversation (the
//! same run, as `-c` carries one on); a line typed while the agents work
//! waits in the lead's prompt queue and is shown as queued. Lines that start
//! with `/` are the built-in commands first ([`BUILTINS`]), then the person's
//! slash commands; a `/word` that names neither is a plain task. Every prompt
//! is kept in the workspace's history ([`History`]). What a line asks for is
//! decided here, purely ([`read`]); the run driver carries it out.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::shown::Shown;
use crate::protocol::{Outcome, SessionId};
use crate::runtime::Handle;
use crate::state::StateDir;
use crate::ui::display::{Display, Progress};

/// The built-in commands, which a person's command of the same name cannot
/// replace.
pub(super) const BUILTINS: [&str; 7] = ["help", "agents", "ps", "cost", "rewind", "exit", "quit"];

/// Prompts kept in a workspace's history, at most.
pub(super) const MAX_HISTORY: usize = 1000;

/// Bytes of a workspace's history, at most.
pub(super) const MAX_HISTORY_BYTES: u64 = 1 << 20;

/// What a typed line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Line {
    /// Nothing (an empty line).
    Nothing,
    /// `/exit`: the session ends.
    Exit,
    /// `/help`: the commands.
    Help,
    /// `/agents`: the roles.
    Agents,
    /// `/ps`: the agents of the run, as their rows show them.
    Ps,
    /// `/cost`: what the run has spent.
    Cost,
    /// `/rewind [N]`: the workspace put back as the run's checkpoint N (its
    /// first by default) holds it.
    Rewind(Option<u32>),
    /// A task or a follow-up (a slash command's name included: it is
    /// expanded when it names one).
    Prompt(String),
    /// `/rewind` with something that is not a checkpoint number.
    Bad(String),
}

/// What `line` asks for.
pub(super) fn read(line: &str) -> Line {
    let text = line.trim();
    if text.is_empty() {
        return Line::Nothing;
    }
    let Some(command) = text.strip_prefix('/') else {
        return Line::Prompt(text.to_owned());
    };
    let (name, rest) = command
        .split_once(char::is_whitespace)
        .unwrap_or((command, ""));
    let rest = rest.trim();
    match name {
        "exit" | "quit" | "help" | "agents" | "ps" | "cost" if !rest.is_empty() => {
            Line::Bad(format!("/{name} takes nothing after it"))
        }
        "exit" | "quit" => Line::Exit,
        "help" => Line::Help,
        "agents" => Line::Agents,
        "ps" => Line::Ps,
        "cost" => Line::Cost,
        "rewind" if rest.is_empty() => Line::Rewind(None),
        "rewind" => match rest.parse() {
            Ok(n) => Line::Rewind(Some(n)),
            Err(_) => Line::Bad(format!(
                "/rewind takes a checkpoint number (`/rewind 2`), not {rest:?}"
            )),
        },
        _ => Line::Prompt(text.to_owned()),
    }
}

/// What `/help` says, with the person's `commands` (name, description).
pub(super) fn help(commands: &[(String, String)]) -> String {
    let mut text = String::from(
        "Type a task; each line after is a follow-up in the same conversation.\n\
         Ctrl-C cancels what runs; Ctrl-C again, Ctrl-D on an empty line or /exit quits.\n\
         /help      this\n\
         /agents    the roles sub-agents can take\n\
         /ps        the agents of this run\n\
         /cost      what this run has spent\n\
         /rewind N  the workspace as the run's checkpoint N holds it (the first by default)\n\
         /exit      quit\n",
    );
    // A command named as a built-in is not used.
    for (name, description) in commands
        .iter()
        .filter(|(n, _)| !BUILTINS.contains(&n.as_str()))
    {
        text.push_str(&format!("/{name:<9} {description}\n"));
    }
    text
}

/// A workspace's prompts, one JSON string a line, the newest last, at most
/// [`MAX_HISTORY`], in a file only its owner may read.
#[derive(Debug)]
pub(super) struct History {
    path: PathBuf,
}

impl History {
    /// The history kept at `path`.
    pub(super) fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// Adds `prompt`, dropping the oldest past the cap (in prompts, and in
    /// bytes). A history that cannot be read is left as it is, not replaced.
    pub(super) fn add(&self, prompt: &str) -> std::io::Result<()> {
        let line = serde_json::to_string(prompt).unwrap_or_default();
        // One that would fill the history alone is not kept.
        if line.len() as u64 >= MAX_HISTORY_BYTES {
            return Ok(());
        }
        let mut kept: VecDeque<String> =
            match crate::small_file::read_to_string(&self.path, MAX_HISTORY_BYTES) {
                Ok(text) => text.lines().map(str::to_owned).collect(),
                Err(e) if e.is_not_found() => VecDeque::new(),
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            };
        kept.push_back(line);
        let mut bytes: usize = kept.iter().map(|l| l.len() + 1).sum();
        while kept.len() > MAX_HISTORY || (bytes as u64 > MAX_HISTORY_BYTES && kept.len() > 1) {
            bytes -= kept.pop_front().map_or(0, |l| l.len() + 1);
        }
        let mut text = Vec::from(kept).join("\n");
        text.push('\n');
        let folder = self.path.parent().unwrap_or(Path::new("."));
        crate::small_file::replace_whole(folder, &self.path, text.as_bytes())
    }

    /// Keeps `line` (what was typed; nothing for an empty one); a history
    /// that cannot be written is no reason to stop the session.
    pub(super) fn keep(&self, line: &str) {
        let line = line.trim();
        if !line.is_empty()
            && let Err(e) = self.add(line)
        {
            tracing::warn!(error = %e, "the prompt is not kept in the history");
        }
    }

    /// The prompts, oldest first.
    #[cfg(test)]
    pub(super) fn prompts(&self) -> Vec<String> {
        let text =
            crate::small_file::read_to_string(&self.path, MAX_HISTORY_BYTES).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// The session as the run driver follows it.
#[derive(Debug)]
pub(super) struct Session {
    /// The prompts sent and not answered yet, oldest first.
    pub(super) waiting: VecDeque<u64>,
    /// Where the prompts are kept.
    pub(super) history: History,
    /// A Ctrl-C cancelled what ran; another quits.
    pub(super) interrupted: bool,
    /// How progress is shown, to show the next prompt's afresh.
    pub(super) mode: Progress,
    /// The roles' colors.
    pub(super) colors: std::collections::HashMap<String, String>,
    /// Where the display records the labels the questions name.
    pub(super) names: Option<crate::ui::Names>,
}

/// What the prompt line looks like.
pub(super) const MARK: &str = "› ";

impl Session {
    /// The answer to the oldest prompt waiting came: its tree is left as it
    /// ended, the answer printed, and the next prompt's tree starts afresh
    /// (or the prompt line shows, when none waits).
    pub(super) fn answered(
        &mut self,
        outcome: Outcome,
        shown: &mut Shown,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) {
        shown.display.clear();
        let _ = super::shown::report(shown.json, Some(outcome), out, err);
        // Prompts that joined the run it answers are answered with it.
        let answered = std::mem::take(&mut shown.answered);
        self.waiting.pop_front();
        self.waiting.retain(|p| !answered.contains(p));
        self.interrupted = false;
        shown.prompt = self.waiting.front().copied();
        shown.idle = shown.prompt.is_none();
        if let Progress::Live(multi) = &self.mode {
            multi.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
        shown.display = Display::new(self.mode.clone(), self.colors.clone())
            .naming(self.names.clone())
            .following(shown.display.board());
        if shown.idle {
            let _ = write!(err, "{MARK}");
            let _ = err.flush();
        }
    }
}

/// What carries out the lines typed during a run: its lead, the roles, the
/// slash commands.
pub(super) struct Typed {
    handle: Handle,
    lead: SessionId,
    roles: Vec<(String, String)>,
    workspace: PathBuf,
    state: StateDir,
    home: Option<PathBuf>,
    /// The workspace's commands may run their `` !`…` ``.
    trusted: bool,
}

impl Typed {
    /// For the run whose lead is `lead` in `workspace` (its state in
    /// `state`), whose sub-agents take `roles` (name, description).
    pub(super) fn new(
        workspace: &Path,
        state: &StateDir,
        trusted: bool,
        home: Option<PathBuf>,
        roles: Vec<(String, String)>,
        handle: Handle,
        lead: SessionId,
    ) -> Self {
        Self {
            handle,
            lead,
            roles,
            workspace: workspace.to_owned(),
            state: state.clone(),
            home,
            trusted,
        }
    }

    /// Carries out `line` of `session` (a prompt through the lead's
    /// `hooks`); true when it ends the session.
    pub(super) async fn line(
        &self,
        line: &str,
        (session, hooks): (&mut Session, &super::hooks::LeadHooks),
        shown: &mut Shown,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> bool {
        session.history.keep(line);
        let said = match read(line) {
            Line::Exit => return true,
            Line::Nothing => String::new(),
            Line::Help => help(&crate::commands::list(
                &self.workspace,
                self.home.as_deref(),
            )),
            Line::Agents => (self.roles.iter())
                .map(|(name, description)| format!("{name:<16} {description}\n"))
                .collect(),
            Line::Ps => (shown.run.as_ref())
                .map(|run| {
                    let pending = self.handle.pending_questions();
                    crate::control::ps(run, &pending, shown.began.elapsed(), false)
                })
                .unwrap_or_default(),
            Line::Cost => shown.run.as_ref().map(cost).unwrap_or_default(),
            Line::Bad(why) => format!("{why}\n"),
            Line::Rewind(_) if !session.waiting.is_empty() => {
                "the agents are working: /rewind once they are done\n".to_owned()
            }
            Line::Rewind(to) => {
                let (workspace, state) = (self.workspace.clone(), self.state.clone());
                let _ =
                    super::rewind::rewind_run(workspace, &state, self.lead, to, false, out, err);
                String::new()
            }
            Line::Prompt(text) => {
                let expanded = super::slash::slash(
                    &text,
                    &self.workspace,
                    self.home.as_deref(),
                    self.trusted,
                    err,
                )
                .await;
                // A command's `allowed-tools` narrow the session from its run
                // on, as a first line's do.
                let (prompt, narrow) = match expanded {
                    Ok(Some(slash)) => match slash.narrow() {
                        Ok(narrow) => (slash.prompt, narrow),
                        Err(why) => {
                            say(&format!("orchestrate: {why}\n"), shown, err);
                            return false;
                        }
                    },
                    Ok(None) => (text.clone(), None),
                    Err(e) => {
                        let _ = writeln!(err, "orchestrate: {e}");
                        return false;
                    }
                };
                // A follow-up is the person's prompt as the first was.
                let submitted = hooks.prompt(prompt, None).await;
                hooks.journal();
                let prompt = match submitted {
                    Ok(prompt) => prompt,
                    // Said by the display, as the hook's run is shown.
                    Err(_) => {
                        say("", shown, err);
                        return false;
                    }
                };
                let sent = match narrow {
                    Some(narrow) => self.handle.prompt_narrowed(self.lead, prompt, narrow),
                    None => self.handle.prompt(self.lead, prompt),
                };
                session.waiting.push_back(sent);
                if shown.idle {
                    shown.idle = false;
                    shown.prompt = Some(sent);
                    return false;
                }
                let first = text.lines().next().unwrap_or_default();
                format!("queued: {first}\n")
            }
        };
        say(&said, shown, err);
        false
    }
}

/// Says `text` to the person, then shows the prompt line again when nothing
/// runs.
fn say(text: &str, shown: &mut Shown, err: &mut dyn Write) {
    shown.display.say(text, err);
    if shown.idle {
        let _ = write!(err, "{MARK}");
    }
    let _ = err.flush();
}

/// What `/cost` says of the run `board` shows: the lead's cost (its
/// sub-agents' rolled in as they end) and every agent's tokens.
fn cost(board: &crate::ui::progress::Board) -> String {
    let lead = board.rows().iter().find(|r| r.parent.is_none());
    let tokens: u64 = board.rows().iter().map(|r| r.tokens).sum();
    match lead.map(crate::ui::progress::Row::cost_usd) {
        Some(Some(dollars)) => format!("spent ${dollars:.4}, {tokens} tokens\n"),
        Some(None) => format!("spent {tokens} tokens (a price is unknown)\n"),
        None => "nothing spent yet\n".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_built_in_commands_then_prompts() {
        assert_eq!(read("  "), Line::Nothing);
        assert_eq!(read("/exit"), Line::Exit);
        assert_eq!(read("/help"), Line::Help);
        assert_eq!(read("/rewind"), Line::Rewind(None));
        assert_eq!(read("/rewind 3"), Line::Rewind(Some(3)));
        assert!(matches!(read("/rewind last"), Line::Bad(_)));
        assert_eq!(read("fix the bug"), Line::Prompt("fix the bug".into()));
        // A name no built-in has is left for the slash commands (or a plain task).
        assert_eq!(read("/review a.rs"), Line::Prompt("/review a.rs".into()));
        // A built-in's name is never a person's command.
        assert!(matches!(read("/exit now"), Line::Bad(_)));
        assert_eq!(read("/quit"), Line::Exit);
    }

    #[test]
    fn the_history_keeps_the_newest_prompts_for_its_owner_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(dir.path().join("history"));
        for i in 0..(MAX_HISTORY + 5) {
            history.add(&format!("prompt {i}\nsecond line")).unwrap();
        }
        let kept = history.prompts();
        assert_eq!(kept.len(), MAX_HISTORY);
        assert_eq!(kept[0], "prompt 5\nsecond line");
        let mode = std::fs::metadata(dir.path().join("history"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
