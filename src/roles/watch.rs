//! Hot reload: the role directories are watched, and the catalog is loaded again
//! after a burst of changes settles, so a role edited mid-run takes effect at its
//! next spawn.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};

use super::catalog::Catalog;

/// How long changes must settle before the catalog is loaded again.
const SETTLE: Duration = Duration::from_millis(150);

/// Watches role directories for as long as it lives.
pub struct RoleWatcher {
    _debouncer: Debouncer<RecommendedWatcher>,
}

impl std::fmt::Debug for RoleWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleWatcher").finish_non_exhaustive()
    }
}

/// Watches the directories of `dirs` that exist and reloads `catalog` from all of
/// `dirs` whenever one of them changes.
pub fn watch(dirs: &[PathBuf], catalog: Arc<RwLock<Catalog>>) -> Result<RoleWatcher, String> {
    let reload_dirs = dirs.to_vec();
    let mut debouncer = new_debouncer(SETTLE, move |result: DebounceEventResult| {
        if result.is_ok() {
            let fresh = Catalog::load(&reload_dirs);
            for problem in &fresh.problems {
                tracing::warn!(%problem, "role file problem");
            }
            *catalog
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        }
    })
    .map_err(|e| format!("cannot watch the role directories: {e}"))?;
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        debouncer
            .watcher()
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    }
    Ok(RoleWatcher {
        _debouncer: debouncer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edited_role_is_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("helper.md");
        std::fs::write(&file, "---\nname: helper\ndescription: first\n---\nOne.\n").unwrap();
        let dirs = vec![dir.path().to_owned()];
        let catalog = Arc::new(RwLock::new(Catalog::load(&dirs)));
        let _watcher = watch(&dirs, catalog.clone()).unwrap();
        std::fs::write(&file, "---\nname: helper\ndescription: second\n---\nTwo.\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let description = catalog
                .read()
                .unwrap()
                .get("helper")
                .map(|r| r.description.clone());
            if description.as_deref() == Some("second") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the edit was never picked up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
