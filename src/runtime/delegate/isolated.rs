//! A Task call's private checkout: made before its sub-agent starts, its work
//! brought back when the sub-agent ends. Each step is journaled in the
//! sub-agent's journal (the checkout in its header; then `committed`,
//! `fetched`, `merging`, `merged`, `checkout_removed`), so a call resumed at
//! any point carries on from the last step recorded and nothing is merged
//! twice.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::SessionError;
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
}

impl Checkouts {
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
            if isolate.asked || !no_repository {
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
        .unwrap_or_else(|e| Err(CheckoutError::Io(std::io::Error::other(e.to_string()))))
        .map_err(|e| {
            let no_repository = matches!(e, CheckoutError::NoRepository(_));
            (e.to_string(), no_repository)
        });
        match made {
            Ok(made) => {
                for lack in made.lacks {
                    publisher.publish(EventKind::Shared {
                        reason: format!("the checkout is partial: {lack}"),
                    });
                }
                spec.checkout = Some(made.checkout);
            }
            Err((reason, no_repository)) => {
                let reason = format!("no private checkout: {reason}");
                let mut known = self
                    .checkouts
                    .unusable
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                known.insert(isolate.from.clone(), (reason.clone(), no_repository));
                drop(known);
                say(reason, no_repository);
            }
        }
    }

    /// Brings sub-agent `child`'s work back from its checkout, carrying on
    /// from the steps `work` has recorded: committed, fetched as its branch,
    /// merged into its parent's tree (only for an outcome that is its work:
    /// finished, stopped or timed out), the checkout removed. What became of
    /// the changes; `None` when it had no checkout.
    pub(super) async fn bring_back(
        &self,
        child: SessionId,
        agent: &str,
        parent: Option<SessionId>,
        mut work: Work,
        outcome: Option<&Outcome>,
        isolate: &Isolate,
    ) -> Result<Option<Changes>, SessionError> {
        let Some(checkout) = work.checkout.clone() else {
            return Ok(None);
        };
        let path = self.state.journal(child);
        let journal = |records: Vec<Record>| {
            self.journal
                .append_all(&path, &records)
                .map_err(SessionError::Journal)
        };
        let failed = |e: String| SessionError::Journal(format!("the sub-agent's checkout: {e}"));
        let scratch = self.state.scratch();
        let commit = match work.committed.clone() {
            Some(commit) => commit,
            None => {
                let (c, s) = (checkout.clone(), scratch.clone());
                let commit = blocking(move || steps::commit(&c, &s))
                    .await
                    .map_err(failed)?;
                journal(vec![Record::Committed {
                    commit: commit.clone(),
                }])?;
                commit
            }
        };
        let result = match work.result.take() {
            Some(result) => result,
            None => {
                let result = self
                    .merge(&checkout, &commit, &mut work, outcome, isolate, &journal)
                    .await
                    .map_err(failed)?;
                journal(vec![Record::Merged {
                    result: result.clone(),
                }])?;
                self.journal
                    .sync_file(&path)
                    .await
                    .map_err(SessionError::Journal)?;
                let publisher = Publisher::new(self.bus.clone(), child, parent, agent);
                match &result {
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
                    Changes::Conflict { files, branch } => {
                        publisher.publish(EventKind::Conflicted {
                            files: files.clone(),
                            branch: branch.clone(),
                        })
                    }
                    Changes::None | Changes::Kept { .. } => {}
                }
                result
            }
        };
        if !work.removed {
            let c = checkout.clone();
            blocking(move || steps::remove(&c)).await.map_err(failed)?;
            journal(vec![Record::CheckoutRemoved])?;
        }
        Ok(Some(result))
    }

    /// The merge of `commit` (the checkout's work) into its parent's tree:
    /// fetched as its branch, then, for an outcome that is its work, merged
    /// one at a time with the other merges into that tree.
    async fn merge(
        &self,
        checkout: &Checkout,
        commit: &str,
        work: &mut Work,
        outcome: Option<&Outcome>,
        isolate: &Isolate,
        journal: &impl Fn(Vec<Record>) -> Result<(), SessionError>,
    ) -> Result<Changes, String> {
        let (c, t) = (checkout.clone(), commit.to_owned());
        if blocking(move || steps::unchanged(&c, &t)).await? {
            return Ok(Changes::None);
        }
        let branch = checkout.branch.clone();
        if !work.fetched {
            let (c, t) = (checkout.clone(), commit.to_owned());
            blocking(move || steps::fetch(&c, &t)).await?;
            journal(vec![Record::Fetched {
                branch: branch.clone(),
                commit: commit.to_owned(),
            }])
            .map_err(|e| e.to_string())?;
        }
        let its_work = matches!(
            outcome,
            Some(Outcome::Finished { .. } | Outcome::Stopped { .. } | Outcome::TimedOut { .. })
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
                journal(vec![Record::Merging { ours: ours.clone() }]).map_err(|e| e.to_string())?;
                ours
            }
        };
        let (c, t, o) = (checkout.clone(), commit.to_owned(), ours);
        let plan: MergePlan = blocking(move || steps::plan(&c, &o, &t)).await?;
        let merged = isolation::apply(
            &isolate.files,
            &checkout.into,
            &checkout.prefix,
            isolate.private.clone(),
            plan,
        )
        .await
        .map_err(|e| e.to_string())?;
        let text = |files: Vec<PathBuf>| -> Vec<String> {
            files.iter().map(|f| f.display().to_string()).collect()
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
