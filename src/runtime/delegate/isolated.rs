//! A Task call's private checkout: made before its sub-agent starts, its work
//! brought back when the sub-agent ends. Each step is journaled in the
//! sub-agent's journal (the checkout in its header; then `committed`,
//! `fetched`, `merging`, `merged`, `checkout_removed`), so a call resumed at
//! any point carries on from the last step recorded and nothing is merged
//! twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::events::Publisher;
use crate::git::checkout::{CheckoutError, MergePlan};
use crate::isolation::{self, Isolate, Merged, steps};
use crate::journal::Record;
use crate::protocol::{Changes, Checkout, EventKind, Outcome, SessionId};
use crate::session::SessionSpec;

use super::Handle;

/// What the runtime's private checkouts share.
#[derive(Debug, Default)]
pub(crate) struct Checkouts {
    /// One merge at a time into each tree, in the order they asked (tokio's
    /// lock is fair).
    merging: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// Trees no checkout can be made of, why, and whether because they are in
    /// no repository: asked once.
    unusable: Mutex<HashMap<PathBuf, (String, bool)>>,
    /// Cancelled sub-agents' checkouts being brought back, which the
    /// runtime's shutdown waits for.
    pending: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Checkouts {
    /// Keeps `task` (a cancelled sub-agent's checkout brought back) for
    /// [`Self::settle`].
    pub(super) fn pending(&self, task: tokio::task::JoinHandle<()>) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|t| !t.is_finished());
        pending.push(task);
    }

    /// Waits for the cancelled sub-agents' checkouts being brought back.
    pub(crate) async fn settle(&self) {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        for task in pending {
            let _ = task.await;
        }
    }

    fn merge_lock(&self, tree: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.merging.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(tree.to_owned()).or_default().clone()
    }

    fn unusable(&self, tree: &Path) -> Option<(String, bool)> {
        let known = self.unusable.lock().unwrap_or_else(|e| e.into_inner());
        known.get(tree).cloned()
    }
}

/// How far a sub-agent's checkout got, as its journal tells it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Work {
    /// The checkout.
    pub(crate) checkout: Option<Checkout>,
    /// Its work, committed.
    pub(crate) committed: Option<String>,
    /// That commit is on its branch.
    pub(crate) fetched: bool,
    /// The parent's tree when the merge began.
    pub(crate) merging: Option<String>,
    /// What became of it.
    pub(crate) result: Option<Changes>,
    /// The checkout is gone.
    pub(crate) removed: bool,
    /// Checks run so far.
    pub(crate) checked: u32,
    /// The last check passed.
    pub(crate) check_passed: bool,
    /// The prompt a failed check left to send (none sent after it yet).
    pub(crate) check_prompt: Option<String>,
    /// The last check was refused.
    pub(crate) check_refused: bool,
    /// It ran on another machine, which keeps its journal: its steps are
    /// not journaled here, and its work, when it cannot be brought back, is
    /// kept where this says.
    pub(crate) elsewhere: Option<String>,
}

/// Reads a sub-agent's journal for its checkout's steps.
pub(crate) fn work(records: &[Record]) -> Work {
    let mut work = Work::default();
    for record in records {
        match record {
            Record::Header { checkout, .. } => work.checkout = checkout.clone(),
            Record::Committed { commit } => work.committed = Some(commit.clone()),
            Record::Fetched { .. } => work.fetched = true,
            Record::Merging { ours } => work.merging = Some(ours.clone()),
            Record::Merged { result } => work.result = Some(result.clone()),
            Record::CheckoutRemoved => work.removed = true,
            Record::Checked {
                attempt,
                passed,
                prompt,
                refused,
                ..
            } => {
                work.checked = *attempt;
                work.check_passed = *passed;
                work.check_prompt = prompt.clone();
                work.check_refused = *refused;
            }
            // A prompt sent after a failed check: it is not to be sent again.
            Record::RunStarted { .. } => work.check_prompt = None,
            _ => {}
        }
    }
    work
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CheckoutError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the git step did not finish: {e}")),
    }
}

impl Handle {
    /// Makes sub-agent `child`'s private checkout of `isolate.from` and puts
    /// it in `spec`; when none can be made, says why as the sub-agent (a
    /// `shared` event; not for a tree in no repository unless isolation was
    /// asked for) and leaves `spec` in its parent's tree.
    pub(super) async fn isolate(
        &self,
        child: SessionId,
        spec: &mut SessionSpec,
        isolate: &Isolate,
    ) {
        let publisher = Publisher::new(self.bus.clone(), child, spec.parent, &spec.agent);
        let say = |reason: String, no_repository: bool| {
            if isolate.wanted == isolation::Wanted::Asked || !no_repository {
                publisher.publish(EventKind::Shared { reason });
            }
        };
        if let Some((reason, no_repository)) = self.checkouts.unusable(&isolate.from) {
            say(reason, no_repository);
            return;
        }
        let branch = isolation::branch_name(isolate.run, &spec.agent, child);
        let (from, dest, scratch, folder, private) = (
            isolate.from.clone(),
            self.state.checkout(child),
            self.state.scratch(),
            self.state.checkouts(),
            isolate.private.clone(),
        );
        let made = tokio::task::spawn_blocking(move || {
            crate::state::make_private_dir(&folder, false)
                .map_err(|e| CheckoutError::Io(std::io::Error::other(e.to_string())))?;
            steps::make(&from, &dest, &scratch, branch, &private)
        })
        .await
        .unwrap_or_else(|e| Err(CheckoutError::Io(std::io::Error::other(e.to_string()))));
        match made {
            Ok(made) => spec.checkout = Some(made.checkout),
            Err(e) => {
                let no_repository = matches!(e, CheckoutError::NoRepository(_));
                let reason = format!("no private checkout: {e}");
                // What this run cannot change is asked once; anything else (a
                // lock held a moment, a full disk) is tried again next time.
                let lasting = matches!(
                    e,
                    CheckoutError::NoRepository(_)
                        | CheckoutError::NoCommits(_)
                        | CheckoutError::OldGit { .. }
                );
                if lasting {
                    let mut known = self
                        .checkouts
                        .unusable
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    known.insert(isolate.from.clone(), (reason.clone(), no_repository));
                }
                say(reason, no_repository);
            }
        }
    }

    /// Brings sub-agent `child`'s work back from its checkout, carrying on
    /// from the steps `work` has recorded: committed, kept as its branch,
    /// merged into its parent's tree (only for an outcome that is its work:
    /// finished, stopped or timed out), the checkout removed; each step's
    /// record durable before the next step. What became of the changes
    /// (`None` when it had no checkout of its own); a step that fails leaves
    /// the checkout where it is and says so.
    pub(super) async fn bring_back(
        &self,
        child: SessionId,
        agent: &str,
        parent: Option<SessionId>,
        work: Work,
        outcome: Option<&Outcome>,
        isolate: &Isolate,
    ) -> Option<Changes> {
        let checkout = work.checkout.clone().filter(|c| !c.borrowed)?;
        let root = (work.elsewhere.clone()).unwrap_or_else(|| checkout.root.display().to_string());
        let changes = match self
            .bring_back_steps(child, work, checkout, outcome, isolate)
            .await
        {
            Ok(changes) => changes,
            Err(reason) => Changes::Unmerged {
                reason,
                checkout: root,
            },
        };
        let publisher = Publisher::new(self.bus.clone(), child, parent, agent);
        match &changes {
            Changes::Merged {
                files,
                added,
                removed,
                ..
            } => publisher.publish(EventKind::Merged {
                files: files.clone(),
                added: *added,
                removed: *removed,
            }),
            Changes::Conflict { files, branch } => publisher.publish(EventKind::Conflicted {
                files: files.clone(),
                branch: branch.clone(),
            }),
            Changes::Kept { branch } => publisher.publish(EventKind::Kept {
                branch: branch.clone(),
            }),
            Changes::Unmerged { reason, checkout } => publisher.publish(EventKind::Unmerged {
                reason: reason.clone(),
                checkout: checkout.clone(),
            }),
            Changes::None => {}
        }
        Some(changes)
    }

    /// Brings back the work of sub-agent `child`, which ran on another
    /// machine: `commit` (fetched from its worker, on `checkout`'s base;
    /// `None` when it changed nothing) kept as its branch and merged as a
    /// private checkout's work is, its snapshot let go; when that fails, its
    /// work stays where `kept` says. Nothing is journaled here: its journal
    /// is its worker's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn bring_back_fetched(
        &self,
        child: SessionId,
        agent: &str,
        parent: Option<SessionId>,
        checkout: Checkout,
        (commit, kept): (Option<String>, String),
        outcome: Option<&Outcome>,
        isolate: &Isolate,
    ) -> Option<Changes> {
        let work = Work {
            // No commit: the base itself, which changes nothing.
            committed: Some(commit.unwrap_or_else(|| checkout.base.clone())),
            checkout: Some(checkout),
            elsewhere: Some(kept),
            ..Work::default()
        };
        self.bring_back(child, agent, parent, work, outcome, isolate)
            .await
    }

    /// Appends `record` to sub-agent `child`'s journal and waits until it is
    /// durable (not for one that ran `elsewhere`).
    async fn record(
        &self,
        child: SessionId,
        elsewhere: bool,
        record: Record,
    ) -> Result<(), String> {
        if elsewhere {
            return Ok(());
        }
        let path = self.state.journal(child);
        self.journal.append(&path, &record)?;
        self.journal.sync_file(&path).await
    }

    /// [`Self::bring_back`]'s steps.
    async fn bring_back_steps(
        &self,
        child: SessionId,
        mut work: Work,
        checkout: Checkout,
        outcome: Option<&Outcome>,
        isolate: &Isolate,
    ) -> Result<Changes, String> {
        let scratch = self.state.scratch();
        let commit = match work.committed.clone() {
            Some(commit) => commit,
            None => {
                let (c, s) = (checkout.clone(), scratch.clone());
                let commit = blocking(move || steps::commit(&c, &s)).await?;
                let committed = Record::Committed {
                    commit: commit.clone(),
                };
                self.record(child, work.elsewhere.is_some(), committed)
                    .await?;
                commit
            }
        };
        let result = match work.result.take() {
            Some(result) => result,
            None => {
                let result = self
                    .merge(child, &checkout, &commit, &mut work, outcome, isolate)
                    .await?;
                let merged = Record::Merged {
                    result: result.clone(),
                };
                self.record(child, work.elsewhere.is_some(), merged).await?;
                result
            }
        };
        if !work.removed {
            let c = checkout.clone();
            blocking(move || steps::remove(&c)).await?;
            self.record(child, work.elsewhere.is_some(), Record::CheckoutRemoved)
                .await?;
        }
        Ok(result)
    }

    /// The merge of `commit` (the checkout's work) into its parent's tree:
    /// kept as its branch, then, for an outcome that is its work, merged one
    /// at a time with the other merges into that tree.
    async fn merge(
        &self,
        child: SessionId,
        checkout: &Checkout,
        commit: &str,
        work: &mut Work,
        outcome: Option<&Outcome>,
        isolate: &Isolate,
    ) -> Result<Changes, String> {
        let (c, t) = (checkout.clone(), commit.to_owned());
        if blocking(move || steps::unchanged(&c, &t)).await? {
            return Ok(Changes::None);
        }
        let branch = checkout.branch.clone();
        if !work.fetched {
            let (c, t) = (checkout.clone(), commit.to_owned());
            blocking(move || steps::keep(&c, &t)).await?;
            let fetched = Record::Fetched {
                branch: branch.clone(),
                commit: commit.to_owned(),
            };
            self.record(child, work.elsewhere.is_some(), fetched)
                .await?;
        }
        let its_work = matches!(
            outcome,
            Some(Outcome::Completed { .. } | Outcome::Partial { .. } | Outcome::TimedOut { .. })
        );
        if !its_work {
            return Ok(Changes::Kept { branch });
        }
        let lock = self.checkouts.merge_lock(&checkout.into);
        let _turn = lock.lock().await;
        let ours = match work.merging.clone() {
            Some(ours) => ours,
            None => {
                let (c, s, p) = (
                    checkout.clone(),
                    self.state.scratch(),
                    isolate.private.clone(),
                );
                let ours = blocking(move || steps::ours(&c, &s, &p)).await?;
                let merging = Record::Merging { ours: ours.clone() };
                self.record(child, work.elsewhere.is_some(), merging)
                    .await?;
                ours
            }
        };
        let (c, t, o) = (checkout.clone(), commit.to_owned(), ours);
        let plan: MergePlan = blocking(move || steps::plan(&c, &o, &t)).await?;
        if let (Some(checkpoints), MergePlan::Clean(_)) = (&isolate.checkpoints, &plan) {
            checkpoints
                .before_merge(&checkout.into, &checkout.branch)
                .await;
        }
        let merged = isolation::apply(
            &isolate.files,
            &checkout.into,
            &checkout.prefix,
            isolate.private.clone(),
            plan,
        )
        .await
        .map_err(|e| e.to_string())?;
        // From the parent's place, as its own tools name them.
        let text = |files: Vec<PathBuf>| -> Vec<String> {
            files
                .iter()
                .map(|f| {
                    f.strip_prefix(&checkout.prefix)
                        .unwrap_or(f)
                        .display()
                        .to_string()
                })
                .collect()
        };
        Ok(match merged {
            Merged::Nothing => Changes::None,
            Merged::Merged {
                files,
                added,
                removed,
            } => Changes::Merged {
                files: text(files),
                added,
                removed,
                branch,
            },
            Merged::Conflict { files } => Changes::Conflict {
                files: text(files),
                branch,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_tells_how_far_a_checkout_got() {
        let checkout = Checkout {
            root: "/s/checkouts/c".into(),
            workdir: "/s/checkouts/c".into(),
            into: "/w".into(),
            prefix: PathBuf::new(),
            base: "b".into(),
            branch: "orchestrate/0193/coder-1".into(),
            lacks: Vec::new(),
            borrowed: false,
        };
        let header = Record::Header {
            session: SessionId::new(),
            agent: "coder".into(),
            model: "m".into(),
            parent: None,
            tool_call_id: None,
            run: None,
            format: crate::journal::FORMAT,
            checkout: Some(checkout.clone()),
            remote: false,
        };
        let mut records = vec![header];
        assert_eq!(work(&records).checkout, Some(checkout));
        assert_eq!(work(&records).committed, None);
        records.push(Record::Committed {
            commit: "c1".into(),
        });
        records.push(Record::Fetched {
            branch: "b".into(),
            commit: "c1".into(),
        });
        records.push(Record::Merging { ours: "o".into() });
        let cut = work(&records);
        assert_eq!(
            (
                cut.committed.as_deref(),
                cut.fetched,
                cut.merging.as_deref()
            ),
            (Some("c1"), true, Some("o"))
        );
        assert_eq!(cut.result, None, "a merge cut off is done again");
        records.push(Record::Merged {
            result: Changes::None,
        });
        records.push(Record::CheckoutRemoved);
        let done = work(&records);
        assert_eq!(done.result, Some(Changes::None));
        assert!(done.removed);
    }
}
