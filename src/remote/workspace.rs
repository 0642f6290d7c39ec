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

/// `stored`, read back from the store into a file of `scratch`.
async fn download(store: &Store, scratch: &Path, stored: &Stored) -> Result<Scratch, String> {
    let file = Scratch::new(scratch, &stored.object)?;
    store.get(stored, &file.0).await?;
    Ok(file)
}

/// Fetches `stored` (read back into `file`) into the repository at `root`
/// as ref `into`, every object checked.
async fn fetch_file(
    root: &Path,
    file: &Scratch,
    stored: &Stored,
    into: &str,
) -> Result<(), String> {
    let (r, f, s, i) = (
        root.to_owned(),
        file.0.clone(),
        stored.clone(),
        into.to_owned(),
    );
    blocking(move || bundle::fetch(&r, &f, &s.object, &s.tip, &i)).await
}

/// The largest file a sub-agent's work may bring back.
pub const MAX_BLOB: u64 = 256 << 20;

/// How long a base sent is used for a run's next tasks: well within the
/// day the store keeps it.
const BASE_KEPT: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

/// The bases a run has sent, by commit: each is sent once (again after
/// half a day, before the store lets it go).
#[derive(Debug, Default)]
pub struct Bases(tokio::sync::Mutex<HashMap<String, (Stored, std::time::Instant)>>);

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
                Some((sent, at)) if at.elapsed() < BASE_KEPT => sent.clone(),
                _ => {
                    let name = object(self.run, &format!("base.{base}"));
                    let sent =
                        put_bundle(self.store, into, &self.scratch, &name, &base, None).await?;
                    bases.insert(base.clone(), (sent.clone(), std::time::Instant::now()));
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
/// sub-agent was sent, each of whose files is at most [`MAX_BLOB`]. The
/// commit.
pub async fn fetch_work(
    store: &Store,
    scratch: &Path,
    run: SessionId,
    session: SessionId,
    work: &Stored,
    checkout: &Checkout,
) -> Result<String, String> {
    let expected = object(run, &format!("work.{session}."));
    if !work.object.starts_with(&expected) || !bundle::valid_name(&work.object) {
        return Err(format!(
            "the worker named {:?}, not a file of this sub-agent's ({expected}…)",
            work.object
        ));
    }
    let into = fetched_ref(session);
    let file = download(store, scratch, work).await?;
    fetch_file(&checkout.into, &file, work, &into).await?;
    drop(file);
    let (root, tip, base) = (
        checkout.into.clone(),
        work.tip.clone(),
        checkout.base.clone(),
    );
    let refused = blocking(move || {
        if bundle::only_parent(&root, &tip)?.as_deref() != Some(base.as_str()) {
            return Ok(Some(format!(
                "the work sent back ({tip}) is not one commit on the snapshot {base} it was sent"
            )));
        }
        let largest = bundle::largest_change(&root, &base, &tip)?;
        Ok((largest > MAX_BLOB).then(|| {
            format!("the work sent back holds a file of {largest} bytes, more than {MAX_BLOB}")
        }))
    })
    .await;
    let refused = match refused {
        Ok(None) => return Ok(work.tip.clone()),
        Ok(Some(why)) | Err(why) => why,
    };
    let root = checkout.into.clone();
    let _ = blocking(move || {
        bundle::delete_ref(&root, &into);
        Ok(())
    })
    .await;
    Err(refused)
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

/// A task's tree on a worker: where it comes from and goes.
#[derive(Clone, Copy, Debug)]
pub struct Task<'a> {
    /// The store its bundles travel through.
    pub store: &'a Store,
    /// Where temporary indexes and bundles are made.
    pub scratch: &'a Path,
    /// Its run.
    pub run: SessionId,
    /// Its sub-agent.
    pub session: SessionId,
    /// What it was sent.
    pub workspace: &'a Workspace,
    /// The folder it works in.
    pub folder: &'a Path,
}

/// A worker's repositories of the bundles it was sent, one per run (so a
/// run's tasks reach only what their own lead sent): a run's base stays for
/// its next tasks, each task's checkout is a clone that shares its objects,
/// and a run's repository goes a day after it was last used.
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    /// One fetch into a repository at a time.
    fetching: tokio::sync::Mutex<()>,
}

impl Cache {
    /// The repositories in `dir` (made when first used).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn snapshot_ref(session: SessionId) -> String {
        format!("refs/orchestrate/snapshots/{session}")
    }

    /// Run `run`'s repository.
    fn of(&self, run: SessionId) -> PathBuf {
        self.dir.join(format!("{run}.git"))
    }

    /// Removes the repositories of runs not used for a day (no task of
    /// theirs can still come), and marks `run`'s as used now.
    fn tidy(&self, run: SessionId) {
        let now = std::time::SystemTime::now();
        let used = std::fs::File::open(self.of(run)).and_then(|dir| dir.set_modified(now));
        drop(used);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|at| now.duration_since(at).ok())
                .is_some_and(|age| age > super::subjects::TIME_TO_LIVE);
            let name = entry.file_name();
            if old && name.to_string_lossy().ends_with(".git") {
                let _ = steps::remove_tree(&entry.path());
            }
        }
    }

    /// Checks `task`'s workspace out into its folder (empty): the folder its
    /// sub-agent works in. Every bundle must be the run's and the snapshot
    /// one commit on the base.
    pub async fn check_out(&self, task: &Task<'_>) -> Result<PathBuf, String> {
        let Task {
            store,
            scratch,
            run,
            session,
            workspace,
            folder,
        } = *task;
        let prefix = below(&workspace.prefix)?;
        let (base, snapshot) = (&workspace.base, &workspace.snapshot);
        let expected = object(run, &format!("base.{}", base.tip));
        if base.object != expected || snapshot.object != object(run, &format!("snapshot.{session}"))
        {
            return Err("the task names files of another run or task".into());
        }
        let repository = self.of(run);
        // Read back first, with nothing held: only git's fetch takes turns.
        let (dir, tip) = (repository.clone(), base.tip.clone());
        let have_base = blocking(move || Ok(bundle::has_commit(&dir, &tip))).await?;
        let base_file = match have_base {
            true => None,
            false => Some(download(store, scratch, base).await?),
        };
        let snapshot_file = download(store, scratch, snapshot).await?;
        {
            let _one = self.fetching.lock().await;
            let dir = repository.clone();
            if !dir.join("HEAD").exists() {
                blocking(move || bundle::init_bare(&dir)).await?;
            }
            if let Some(file) = &base_file {
                let into = format!("refs/orchestrate/bases/{}", base.tip);
                fetch_file(&repository, file, base, &into).await?;
            }
            let into = Self::snapshot_ref(session);
            fetch_file(&repository, &snapshot_file, snapshot, &into).await?;
            self.tidy(run);
        }
        drop((base_file, snapshot_file));
        let (dir, tip) = (repository.clone(), snapshot.tip.clone());
        let parent = blocking(move || bundle::only_parent(&dir, &tip)).await?;
        if parent.as_deref() != Some(base.tip.as_str()) {
            return Err("the snapshot is not one commit on the base it was sent with".into());
        }
        let (dir, dest, tip) = (repository, folder.to_owned(), snapshot.tip.clone());
        blocking(move || checkout::clone(&dir, &dest, &tip)).await?;
        let workdir = folder.join(prefix);
        std::fs::create_dir_all(&workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
        Ok(workdir)
    }

    /// Sends back the work done in `task`'s folder: its tree committed on
    /// the snapshot by the run's repository's git (the clone's, which the
    /// model wrote, is not used), as a bundle in the store, named apart from
    /// any other worker's of the same task; `None` when it changed nothing.
    pub async fn send_back(&self, task: &Task<'_>) -> Result<Option<Stored>, String> {
        let repository = self.of(task.run);
        let snapshot = &task.workspace.snapshot.tip;
        let (dir, tree, base, s) = (
            repository.clone(),
            task.folder.to_owned(),
            snapshot.clone(),
            task.scratch.to_owned(),
        );
        let commit = blocking(move || checkout::commit_work_tree(&dir, &tree, &base, &s)).await?;
        let (dir, base, c) = (repository.clone(), snapshot.clone(), commit.clone());
        let result = if blocking(move || checkout::same_tree(&dir, &base, &c)).await? {
            Ok(None)
        } else {
            let name = object(
                task.run,
                &format!("work.{}.{}", task.session, SessionId::new()),
            );
            put_bundle(
                task.store,
                &repository,
                task.scratch,
                &name,
                &commit,
                Some(snapshot),
            )
            .await
            .map(Some)
        };
        let (dir, name) = (repository, Self::snapshot_ref(task.session));
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
