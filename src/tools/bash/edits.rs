//! Bash's edits as diffs: the folder a command runs in is compared before and
//! after it, through a shadow index ([`crate::git::shadow`]) that only the
//! paths the kernel saw touched ([`watch`]) are brought into, and what changed
//! is told as the file changes of the call, as Write's and Edit's are.
//!
//! One [`Trees`] per runtime knows each folder commands ran in; each folder's
//! looks are taken one at a time. What a look finds is the call's that ends
//! with it; a look taken as a call starts while others run in the same folder
//! finds what they did so far, told with the one of them that started first.
//! Either way, when several calls ran, the change names them all. What a look
//! finds while no call runs (the file tools' writes, the person's) is nobody's.

mod diffs;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dashmap::DashMap;

use self::watch::{Dirty, Watch};
use crate::git::checkout::PathChange;
use crate::git::shadow::Shadow;
use crate::protocol::CallRef;
use crate::tools::{FileChange, ToolContext};

/// The folders a runtime's commands ran in, each compared before and after
/// every command. Without a scratch folder nothing is compared.
#[derive(Debug, Default)]
pub struct Trees {
    scratch: Option<PathBuf>,
    trees: DashMap<PathBuf, Arc<Tree>>,
}

impl Trees {
    /// Compares folders with shadow indexes in `scratch` (a private folder).
    pub fn new(scratch: PathBuf) -> Self {
        Self {
            scratch: Some(scratch),
            trees: DashMap::new(),
        }
    }

    /// Folder `folder`'s, made now if it is new.
    fn tree(&self, folder: &Path, leave_out: &[PathBuf]) -> Option<Arc<Tree>> {
        let scratch = self.scratch.as_ref()?;
        let tree = self.trees.entry(folder.to_owned()).or_insert_with(|| {
            Arc::new(Tree {
                folder: folder.to_owned(),
                scratch: scratch.clone(),
                leave_out: leave_out.to_vec(),
                state: Mutex::default(),
                gone: Mutex::default(),
            })
        });
        Some(tree.clone())
    }
}

/// One folder's comparisons.
#[derive(Debug)]
struct Tree {
    folder: PathBuf,
    scratch: PathBuf,
    leave_out: Vec<PathBuf>,
    state: Mutex<State>,
    /// The calls gone without an end, for the next look to forget: a lock
    /// never held across a look, so that dropping a call never waits for one.
    gone: Mutex<Vec<u64>>,
}

#[derive(Debug, Default)]
struct State {
    /// `None` until the first look.
    looked: Option<Looked>,
    /// The calls running in the folder, first started first, by number.
    running: Vec<(u64, CallRef)>,
    next: u64,
    /// What looks found for each running call before it ended.
    found: Vec<(u64, FileChange)>,
}

#[derive(Debug)]
enum Looked {
    /// The folder as the last look saw it.
    Seen {
        shadow: Box<Shadow>,
        /// `None`: every look compares the whole folder.
        watch: Option<Watch>,
        /// The last look failed: what its watch named may be missing, so the
        /// next compares the whole folder.
        failed: bool,
    },
    /// It cannot be compared (too large outside a repository, no git).
    Never,
}

impl State {
    /// Forgets the calls `gone`: what was found for one of them goes to the
    /// first call still running.
    fn forget(&mut self, gone: &[u64]) {
        self.running.retain(|(n, _)| !gone.contains(n));
        let heir = self.running.first().map(|(n, _)| *n);
        self.found = std::mem::take(&mut self.found)
            .into_iter()
            .filter_map(|(n, change)| match (gone.contains(&n), heir) {
                (false, _) => Some((n, change)),
                (true, Some(heir)) => Some((heir, change)),
                (true, None) => None,
            })
            .collect();
    }

    /// Every call running.
    fn calls(&self) -> Vec<CallRef> {
        self.running.iter().map(|(_, c)| c.clone()).collect()
    }

    /// Call `n` ends: what was found for it.
    fn finish(&mut self, n: u64) -> Vec<FileChange> {
        self.running.retain(|(m, _)| *m != n);
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.found)
            .into_iter()
            .partition(|(owner, _)| *owner == n);
        self.found = others;
        mine.into_iter().map(|(_, change)| change).collect()
    }
}

impl Tree {
    /// The folder's state, the calls gone since the last look forgotten.
    fn state(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let gone = std::mem::take(&mut *self.gone.lock().unwrap_or_else(PoisonError::into_inner));
        if !gone.is_empty() {
            state.forget(&gone);
        }
        state
    }

    /// `call` starts: what changed since the last look is told with the
    /// calls already running. Its number.
    fn begin(&self, call: CallRef) -> u64 {
        let mut guard = self.state();
        let state: &mut State = &mut guard;
        let calls = state.calls();
        let (changes, shadow) = self.look(&mut state.looked);
        if let (Some(shadow), Some((first, _))) = (shadow, state.running.first())
            && !changes.is_empty()
        {
            let first = *first;
            let told = told(shadow, &changes, &calls);
            state.found.extend(told.into_iter().map(|c| (first, c)));
        }
        state.next += 1;
        let n = state.next;
        state.running.push((n, call));
        n
    }

    /// Call `n` ends: what it was told, and what changed since the last look.
    fn end(&self, n: u64) -> Vec<FileChange> {
        let mut guard = self.state();
        let state: &mut State = &mut guard;
        let calls = state.calls();
        let (changes, shadow) = self.look(&mut state.looked);
        let now = shadow.map(|shadow| told(shadow, &changes, &calls));
        let mut mine = state.finish(n);
        mine.extend(now.into_iter().flatten());
        mine
    }

    /// Call `n` is gone without an end (its future was dropped): the next
    /// look forgets it.
    fn forget(&self, n: u64) {
        self.gone
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(n);
    }

    /// What changed since the last look (the first makes the shadow), and
    /// the shadow to read it from, when there is one.
    fn look<'a>(&self, looked: &'a mut Option<Looked>) -> (Vec<PathChange>, Option<&'a Shadow>) {
        let looked = looked.get_or_insert_with(|| self.first_look());
        let Looked::Seen {
            shadow,
            watch,
            failed,
        } = looked
        else {
            return (Vec::new(), None);
        };
        let dirty = match watch.as_mut().map(Watch::take) {
            Some(Ok(dirty)) => dirty,
            Some(Err(e)) => {
                tracing::debug!(folder = %self.folder.display(), "no longer watched: {e}");
                *watch = None;
                Dirty::All
            }
            None => Dirty::All,
        };
        // After a failed look, what its watch named may be missing.
        let dirty = match std::mem::take(failed) {
            true => Dirty::All,
            false => dirty,
        };
        let changes = match dirty {
            Dirty::Paths(paths) if paths.is_empty() => return (Vec::new(), Some(shadow)),
            Dirty::Paths(paths) => shadow.update(Some(&paths.into_iter().collect::<Vec<_>>())),
            Dirty::All => shadow.update(None),
        };
        match changes {
            Ok(changes) => (changes, Some(shadow)),
            Err(e) => {
                tracing::warn!(folder = %self.folder.display(), "Bash's changes not compared: {e}");
                *failed = true;
                (Vec::new(), Some(shadow))
            }
        }
    }

    /// The shadow and the watch, made: the watch first, so that nothing made
    /// while the shadow is filled goes unseen.
    fn first_look(&self) -> Looked {
        let watch = Watch::new(&self.folder, &self.leave_out)
            .inspect_err(|e| tracing::debug!(folder = %self.folder.display(), "not watched: {e}"))
            .ok();
        match Shadow::open(&self.folder, &self.scratch, &self.leave_out) {
            Ok(shadow) => Looked::Seen {
                shadow: Box::new(shadow),
                watch,
                failed: false,
            },
            Err(e) => {
                tracing::info!(folder = %self.folder.display(), "Bash's changes not compared: {e}");
                Looked::Never
            }
        }
    }
}

/// `changes` as file changes, read through `shadow`, seen while `calls` ran.
fn told(shadow: &Shadow, changes: &[PathChange], calls: &[CallRef]) -> Vec<FileChange> {
    if changes.is_empty() {
        return Vec::new();
    }
    let wanted = diffs::wanted(changes);
    let blobs = shadow.blobs(&wanted, diffs::MAX_READ).unwrap_or_else(|e| {
        tracing::warn!("the changed files could not be read: {e}");
        Default::default()
    });
    diffs::told(changes, &blobs, calls)
}

/// A call's comparison under way: [`Seeing::end`] takes what it changed; dropped
/// before (its call cancelled, even while its first look runs), the folder
/// forgets the call.
pub(super) struct Seeing {
    tree: Arc<Tree>,
    slot: Arc<Mutex<Slot>>,
    ended: bool,
}

/// The call's number once its first look is done, and whether the call is gone.
#[derive(Default)]
struct Slot {
    n: Option<u64>,
    gone: bool,
}

/// Starts comparing the folder of `ctx`'s call, when its runtime compares and
/// the call is not in a private checkout (whose git folder is the model's to
/// write, and whose changes come back by its merge).
pub(super) async fn begin(ctx: &ToolContext) -> Option<Seeing> {
    if ctx.checkout.is_some() {
        return None;
    }
    let tree = ctx.trees.tree(&ctx.workspace, &ctx.private)?;
    let call = CallRef {
        session: ctx.session,
        agent: ctx
            .events
            .as_ref()
            .map_or_else(String::new, |e| e.agent().to_owned()),
        call_id: ctx.call_id.clone(),
    };
    let seeing = Seeing {
        tree: tree.clone(),
        slot: Arc::default(),
        ended: false,
    };
    let slot = seeing.slot.clone();
    let started = tokio::task::spawn_blocking(move || {
        let n = tree.begin(call);
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.gone {
            true => tree.forget(n),
            false => slot.n = Some(n),
        }
    });
    started.await.ok()?;
    Some(seeing)
}

impl Seeing {
    /// What the call changed, as the folder shows it now.
    pub(super) async fn end(mut self) -> Vec<FileChange> {
        self.ended = true;
        let n = self.slot.lock().unwrap_or_else(PoisonError::into_inner).n;
        let (tree, Some(n)) = (self.tree.clone(), n) else {
            return Vec::new();
        };
        tokio::task::spawn_blocking(move || tree.end(n))
            .await
            .unwrap_or_default()
    }
}

impl Drop for Seeing {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        slot.gone = true;
        if let Some(n) = slot.n {
            self.tree.forget(n);
        }
    }
}

#[cfg(test)]
mod tests;
