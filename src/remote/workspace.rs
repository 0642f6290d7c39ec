//! A remote sub-agent's workspace. The lead sends its parent's tree as two
//! git bundles through the [`Store`]: the base commit with its history (sent
//! once a run, shared by the tasks that start from it) and a snapshot of the
//! tree as it is now, one commit beyond it. The worker checks the snapshot
//! out from a repository of the bundles it was sent ([`Cache`]), as a
//! private checkout is made locally, and sends the sub-agent's work back as
//! a bundle of one commit on the snapshot, which the lead fetches into the
//! person's repository, every object checked, to be merged as a private
//! checkout's work is.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::store::{Store, Stored, object};
use crate::git::{bundle, checkout};
use crate::isolation::steps;
use crate::protocol::{Checkout, SessionId};

/// What a task carries of its workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    /// The base commit, with its history.
    pub base: Stored,
    /// The snapshot: the tree as its parent left it, one commit on the base.
    pub snapshot: Stored,
    /// The parent's folder below the repository's top (empty at the top).
    pub prefix: String,
}

/// Runs `f` on the blocking pool, its error as a line.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, checkout::CheckoutError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the git step did not finish: {e}")),
    }
}

/// A file of the caller's scratch folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(folder: &Path, name: &str) -> Result<Self, String> {
        std::fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        Ok(Self(
            folder.join(format!("{name}.{}.bundle", SessionId::new())),
        ))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Puts a bundle of `tip` (beyond `known`) of the repository at `root` in
/// the store as `name`.
async fn put_bundle(
    store: &Store,
    root: &Path,
    scratch: &Path,
    name: &str,
    tip: &str,
    known: Option<&str>,
) -> Result<Stored, String> {
    let file = Scratch::new(scratch, name)?;
    let (r, f, n, t, k) = (
        root.to_owned(),
        file.0.clone(),
        name.to_owned(),
        tip.to_owned(),
        known.map(str::to_owned),
    );
    blocking(move || bundle::create(&r, &f, &n, &t, k.as_deref())).await?;
    store.put(name, &file.0, tip).await
}

/// Fetches `stored` from the store into the repository at `root` as ref
/// `into`, every object checked.
async fn fetch_bundle(
    store: &Store,
    root: &Path,
    scratch: &Path,
    stored: &Stored,
    into: &str,
) -> Result<(), String> {
    let file = Scratch::new(scratch, &stored.object)?;
    store.get(stored, &file.0).await?;
    let (r, f, s, i) = (
        root.to_owned(),
        file.0.clone(),
        stored.clone(),
        into.to_owned(),
    );
    blocking(move || bundle::fetch(&r, &f, &s.object, &s.tip, &i)).await
}

/// The bases a run has sent, by commit: each is sent once.
#[derive(Debug, Default)]
pub struct Bases(tokio::sync::Mutex<HashMap<String, Stored>>);

/// A tree sent for a remote sub-agent: what its task carries, and the
/// checkout its work is brought back as (its base the snapshot, pinned
/// until its work is brought back; no folder on this machine).
#[derive(Debug)]
pub struct Sent {
    /// What the task carries.
    pub workspace: Workspace,
    /// Where its work goes back.
    pub checkout: Checkout,
}

/// What a remote sub-agent of run `run` needs to be sent its tree.
#[derive(Debug)]
pub struct Sending<'a> {
    /// The run's store.
    pub store: &'a Store,
    /// The bases the run has sent.
    pub bases: &'a Bases,
    /// Where the temporary indexes and bundles are made.
    pub scratch: PathBuf,
    /// The run's state: never sent.
    pub leave_out: Arc<[PathBuf]>,
    /// The run.
    pub run: SessionId,
}

impl Sending<'_> {
    /// Sends the tree `from` is in for sub-agent `session` (`dest`: where
    /// its checkout would be on this machine, whose name pins its snapshot),
    /// its work to be kept on `branch`. Why not, when the tree is in no
    /// repository or git cannot take it.
    pub async fn send(
        &self,
        from: &Path,
        session: SessionId,
        dest: PathBuf,
        branch: String,
    ) -> Result<Sent, String> {
        let (f, s, l, b, name) = (
            from.to_owned(),
            self.scratch.clone(),
            self.leave_out.clone(),
            branch.clone(),
            steps::pin_name(&dest),
        );
        let taken = blocking(move || steps::take(&f, &s, &b, &l, &name)).await?;
        let checkout = Checkout {
            root: dest,
            workdir: from.to_owned(),
            into: taken.into.clone(),
            prefix: taken.prefix.clone(),
            base: taken.base.clone(),
            branch,
            lacks: taken.lacks,
            borrowed: false,
        };
        match self.bundles(&taken.into, &taken.base, session).await {
            Ok((base, snapshot)) => Ok(Sent {
                workspace: Workspace {
                    base,
                    snapshot,
                    prefix: taken.prefix.to_string_lossy().into_owned(),
                },
                checkout,
            }),
            Err(why) => {
                let c = checkout.clone();
                let _ = blocking(move || steps::remove(&c)).await;
                Err(why)
            }
        }
    }

    /// The base's bundle (made once a run) and the snapshot's.
    async fn bundles(
        &self,
        into: &Path,
        snapshot: &str,
        session: SessionId,
    ) -> Result<(Stored, Stored), String> {
        let (i, t) = (into.to_owned(), snapshot.to_owned());
        let base = blocking(move || bundle::only_parent(&i, &t))
            .await?
            .ok_or_else(|| format!("the snapshot {snapshot} is not one commit on a base"))?;
        let sent = {
            let mut bases = self.bases.0.lock().await;
            match bases.get(&base) {
                Some(sent) => sent.clone(),
                None => {
                    let name = object(self.run, &format!("base.{base}"));
                    let sent =
                        put_bundle(self.store, into, &self.scratch, &name, &base, None).await?;
                    bases.insert(base.clone(), sent.clone());
                    sent
                }
            }
        };
        let name = object(self.run, &format!("snapshot.{session}"));
        let snapshot = put_bundle(
            self.store,
            into,
            &self.scratch,
            &name,
            snapshot,
            Some(&base),
        )
        .await?;
        Ok((sent, snapshot))
    }
}

/// The ref a remote sub-agent's fetched work is kept under until it is on
/// its branch.
pub fn fetched_ref(session: SessionId) -> String {
    format!("refs/orchestrate/remote/{session}")
}

/// Fetches `work` (run `run`'s sub-agent `session`'s, as its worker named
/// it) into the repository of `checkout`, every object checked, as
/// [`fetched_ref`]: refused unless it is one commit on the snapshot the
/// sub-agent was sent. The commit.
pub async fn fetch_work(
    store: &Store,
    scratch: &Path,
    run: SessionId,
    session: SessionId,
    work: &Stored,
    checkout: &Checkout,
) -> Result<String, String> {
    let expected = object(run, &format!("work.{session}"));
    if work.object != expected {
        return Err(format!(
            "the worker named {:?}, not {expected:?}",
            work.object
        ));
    }
    let into = fetched_ref(session);
    fetch_bundle(store, &checkout.into, scratch, work, &into).await?;
    let (root, tip) = (checkout.into.clone(), work.tip.clone());
    let parent = blocking(move || bundle::only_parent(&root, &tip)).await;
    if parent.as_ref().ok().and_then(Option::as_deref) != Some(checkout.base.as_str()) {
        let root = checkout.into.clone();
        let _ = blocking(move || {
            bundle::delete_ref(&root, &into);
            Ok(())
        })
        .await;
        return Err(format!(
            "the work sent back ({}) is not one commit on the snapshot {} it was sent",
            work.tip, checkout.base
        ));
    }
    Ok(work.tip.clone())
}

/// The folder below a checkout's top that `prefix` names, refused unless it
/// is a plain relative path (no `..`, no root).
pub fn below(prefix: &str) -> Result<PathBuf, String> {
    let path = Path::new(prefix);
    if path.components().all(|c| matches!(c, Component::Normal(_))) {
        Ok(path.to_owned())
    } else {
        Err(format!(
            "the workspace's folder {prefix:?} is not a plain relative path"
        ))
    }
}

/// A worker's repository of the bundles it was sent: the bases stay (a
/// run's next tasks start from them), each task's checkout is a clone that
/// shares its objects.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    /// One fetch into it at a time.
    fetching: tokio::sync::Mutex<()>,
}

impl Cache {
    /// The repository at `dir` (made when first used).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn snapshot_ref(session: SessionId) -> String {
        format!("refs/orchestrate/snapshots/{session}")
    }

    /// Checks task `session`'s `workspace` (of run `run`) out into `folder`
    /// (empty): the folder its sub-agent works in. Every bundle must be the
    /// run's and the snapshot one commit on the base.
    pub async fn check_out(
        &self,
        store: &Store,
        scratch: &Path,
        run: SessionId,
        session: SessionId,
        workspace: &Workspace,
        folder: &Path,
    ) -> Result<PathBuf, String> {
        let prefix = below(&workspace.prefix)?;
        let (base, snapshot) = (&workspace.base, &workspace.snapshot);
        let expected = object(run, &format!("base.{}", base.tip));
        if base.object != expected || snapshot.object != object(run, &format!("snapshot.{session}"))
        {
            return Err("the task names files of another run or task".into());
        }
        {
            let _one = self.fetching.lock().await;
            let dir = self.dir.clone();
            if !dir.join("HEAD").exists() {
                blocking(move || bundle::init_bare(&dir)).await?;
            }
            let (dir, tip) = (self.dir.clone(), base.tip.clone());
            if !blocking(move || Ok(bundle::has_commit(&dir, &tip))).await? {
                let into = format!("refs/orchestrate/bases/{}", base.tip);
                fetch_bundle(store, &self.dir, scratch, base, &into).await?;
            }
            let into = Self::snapshot_ref(session);
            fetch_bundle(store, &self.dir, scratch, snapshot, &into).await?;
        }
        let (dir, tip) = (self.dir.clone(), snapshot.tip.clone());
        let parent = blocking(move || bundle::only_parent(&dir, &tip)).await?;
        if parent.as_deref() != Some(base.tip.as_str()) {
            return Err("the snapshot is not one commit on the base it was sent with".into());
        }
        let (dir, dest, tip) = (self.dir.clone(), folder.to_owned(), snapshot.tip.clone());
        blocking(move || checkout::clone(&dir, &dest, &tip)).await?;
        let workdir = folder.join(prefix);
        std::fs::create_dir_all(&workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
        Ok(workdir)
    }

    /// Sends back the work of task `session` (run `run`) done in `folder`:
    /// its tree committed on the snapshot by this repository's git (the
    /// clone's, which the model wrote, is not used), as a bundle in the
    /// store; `None` when it changed nothing.
    pub async fn send_back(
        &self,
        store: &Store,
        scratch: &Path,
        run: SessionId,
        session: SessionId,
        workspace: &Workspace,
        folder: &Path,
    ) -> Result<Option<Stored>, String> {
        let (dir, tree, base, s) = (
            self.dir.clone(),
            folder.to_owned(),
            workspace.snapshot.tip.clone(),
            scratch.to_owned(),
        );
        let commit = blocking(move || checkout::commit_work_tree(&dir, &tree, &base, &s)).await?;
        let (dir, base, c) = (
            self.dir.clone(),
            workspace.snapshot.tip.clone(),
            commit.clone(),
        );
        let result = if blocking(move || checkout::same_tree(&dir, &base, &c)).await? {
            Ok(None)
        } else {
            let name = object(run, &format!("work.{session}"));
            let known = workspace.snapshot.tip.as_str();
            put_bundle(store, &self.dir, scratch, &name, &commit, Some(known))
                .await
                .map(Some)
        };
        let (dir, name) = (self.dir.clone(), Self::snapshot_ref(session));
        let _ = blocking(move || {
            bundle::delete_ref(&dir, &name);
            Ok(())
        })
        .await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_folder_is_a_plain_relative_path() {
        assert_eq!(below("").unwrap(), PathBuf::new());
        assert_eq!(below("src/app").unwrap(), PathBuf::from("src/app"));
        for bad in ["/etc", "../x", "a/../../b", "./a"] {
            assert!(below(bad).is_err(), "{bad:?}");
        }
    }
}
