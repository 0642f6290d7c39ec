//! Hot reload: the role directories are watched, and the catalog is loaded again
//! after a burst of changes settles, so a role edited mid-run takes effect at its
//! next spawn.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::catalog::Catalog;

/// How long changes must settle before the catalog is loaded again.
const SETTLE: Duration = Duration::from_millis(150);

/// Watches role directories for as long as it lives.
pub struct RoleWatcher {
    _debouncer: Debouncer<RecommendedWatcher>,
    reloads: UnboundedReceiver<Reload>,
}

impl RoleWatcher {
    /// The next reload that found new problems or warnings.
    pub async fn reloaded(&mut self) -> Option<Reload> {
        self.reloads.recv().await
    }
}

impl std::fmt::Debug for RoleWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleWatcher").finish_non_exhaustive()
    }
}

/// What a reload found that the load before it had not, for whoever shows the run
/// (the library never prints): role files that broke and fields newly ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reload {
    /// New problems, each `path:line: what is wrong`; the roles they name keep
    /// their previous definition only if another directory defines them.
    pub problems: Vec<String>,
    /// New warnings, each naming its file.
    pub warnings: Vec<String>,
}

/// Watches the directories of `dirs` that exist and reloads `catalog` from all of
/// `dirs` whenever one of them changes. Each reload that finds new problems or
/// warnings reports them to [`RoleWatcher::reloaded`].
pub fn watch(
    dirs: &[PathBuf],
    workspace: &std::path::Path,
    catalog: Arc<RwLock<Catalog>>,
) -> Result<RoleWatcher, String> {
    let reload_dirs = dirs.to_vec();
    let workspace = workspace.to_owned();
    let (report, reports) = unbounded_channel();
    let mut debouncer = new_debouncer(SETTLE, move |result: DebounceEventResult| {
        if result.is_ok() {
            let fresh = Catalog::load_in(&reload_dirs, Some(&workspace));
            let mut current = catalog
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let reload = news(&current, &fresh);
            *current = fresh;
            drop(current);
            for problem in &reload.problems {
                tracing::warn!(%problem, "role file problem");
            }
            if reload != Reload::default() {
                // Nobody listening is fine: the catalog is what matters.
                let _ = report.send(reload);
            }
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
        reloads: reports,
    })
}

/// The problems and warnings of `fresh` that `old` did not have.
fn news(old: &Catalog, fresh: &Catalog) -> Reload {
    let known: HashSet<String> = old.problems.iter().map(ToString::to_string).collect();
    let problems = fresh
        .problems
        .iter()
        .map(ToString::to_string)
        .filter(|p| !known.contains(p))
        .collect();
    let known: HashSet<&String> = old.warnings.iter().collect();
    let warnings = fresh
        .warnings
        .iter()
        .filter(|w| !known.contains(w))
        .cloned()
        .collect();
    Reload { problems, warnings }
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
        let _watcher = watch(&dirs, std::path::Path::new("/"), catalog.clone()).unwrap();
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

    /// Waits for the next report, polling with a deadline.
    fn next(watcher: &mut RoleWatcher) -> Reload {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(reload) = watcher.reloads.try_recv() {
                return reload;
            }
            assert!(std::time::Instant::now() < deadline, "no reload reported");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_reload_reports_only_what_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("helper.md");
        std::fs::write(&file, "---\nname: helper\ndescription: one\n---\nOne.\n").unwrap();
        let dirs = vec![dir.path().to_owned()];
        let catalog = Arc::new(RwLock::new(Catalog::load(&dirs)));
        let mut watcher = watch(&dirs, std::path::Path::new("/"), catalog.clone()).unwrap();

        std::fs::write(&file, "---\nname: helper\n---\nOne.\n").unwrap();
        let broken = next(&mut watcher);
        let path = file.display();
        assert_eq!(
            broken,
            Reload {
                problems: vec![format!("{path}:1: description is required")],
                warnings: Vec::new(),
            }
        );

        std::fs::write(
            &file,
            "---\nname: helper\ndescription: two\nhooks: {}\n---\nTwo.\n",
        )
        .unwrap();
        let mended = next(&mut watcher);
        assert_eq!(mended.problems, Vec::<String>::new());
        assert_eq!(mended.warnings.len(), 1, "{mended:?}");
        assert!(mended.warnings[0].contains("hooks"), "{mended:?}");
    }
}
