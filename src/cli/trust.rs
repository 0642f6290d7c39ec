//! Trusting a workspace whose `orchestrate.toml` sends model requests elsewhere
//! (`config::redirects`): trusted already in the user's file, or by
//! `--trust-workspace`, or by a person's yes on the terminal (asked through the
//! approver, showing every address); refused otherwise, before any request is made.
//! A yes is remembered in the user's file; a no is not, so the next run asks again
//! (as Claude Code's folder trust does).

use std::path::Path;

use super::providers::Files;
use crate::config::{self, Redirect};
use crate::error::ConfigError;
use crate::tools::permissions::Approver;
use crate::ui;

/// Whether the run may go on. `Ok` carries warnings to show (a trust that could
/// not be remembered).
pub(super) async fn check(
    flag: bool,
    workspace: &Path,
    files: &Files,
    approver: &dyn Approver,
) -> Result<Vec<String>, ConfigError> {
    let key = workspace.display().to_string();
    let untrusted: Vec<Redirect> = config::redirects(&files.workspace)
        .into_iter()
        .filter(|r| !files.user.trusts(&key, &r.base_url))
        .collect();
    if untrusted.is_empty() {
        return Ok(Vec::new());
    }
    let file = files.workspace_path.display().to_string();
    if !flag {
        let question = ui::trust::question(&file, &untrusted);
        match approver.confirm(&question).await {
            Some(true) => {}
            answer => {
                let targets: Vec<String> = untrusted
                    .iter()
                    .map(|r| format!("{:?} (provider {:?})", r.base_url, r.provider))
                    .collect();
                return Err(ConfigError::Untrusted {
                    file,
                    targets: targets.join(", "),
                    declined: answer.is_some(),
                });
            }
        }
    }
    let urls: Vec<&str> = untrusted.iter().map(|r| r.base_url.as_str()).collect();
    Ok(remembered(files.user_path.as_deref(), |text| {
        config::remember(text, &key, &urls)
    }))
}

/// Writes a trust into the user's file at `path` (`None`: `$HOME` is not set) with
/// `change`; the warnings to show when it could not be remembered.
pub(super) fn remembered(
    path: Option<&Path>,
    change: impl FnOnce(&str) -> Result<String, String>,
) -> Vec<String> {
    let Some(path) = path else {
        return vec!["HOME is not set: the trust in this workspace is not remembered".to_owned()];
    };
    match rewrite(path, change) {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!(
            "cannot remember the trust in {}: {e}; the next run will ask again",
            path.display()
        )],
    }
}

/// Pins an allow rule the person approved for `workspace` in the user's file.
pub(super) fn pin_rule(path: &Path, workspace: &str, rule: &str) -> Result<(), String> {
    rewrite(path, |text| config::pin_rules(text, workspace, &[rule]))
}

/// Rewrites the user's file at `path` (created if need be) with `change`,
/// replacing it whole.
pub(super) fn rewrite(
    path: &Path,
    change: impl FnOnce(&str) -> Result<String, String>,
) -> Result<(), String> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let text = read_or_empty(&path)?;
    let text = change(&text)?;
    crate::tools::files::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())
}

/// A file the user keeps, read bounded; empty when it does not exist yet.
pub(super) fn read_or_empty(path: &Path) -> Result<String, String> {
    match crate::small_file::read_to_string(path, crate::small_file::MAX_BYTES) {
        Ok(text) => Ok(text),
        Err(e) if e.is_not_found() => Ok(String::new()),
        Err(e) => Err(e.problem.to_string()),
    }
}

/// A person at the terminal, for the tests of trust questions.
#[cfg(test)]
pub(super) mod person {
    use std::sync::Mutex;

    use futures::future::BoxFuture;

    use crate::tools::permissions::{Answer, Approver, PermissionRequest};

    /// Answers every trust question with `answer` (`None`: nobody is there), and
    /// keeps the questions shown.
    #[derive(Debug)]
    pub(in crate::cli) struct Person {
        answer: Option<bool>,
        pub(in crate::cli) shown: Mutex<Vec<String>>,
    }

    impl Person {
        pub(in crate::cli) fn new(answer: Option<bool>) -> Self {
            Self {
                answer,
                shown: Mutex::new(Vec::new()),
            }
        }
    }

    impl Approver for Person {
        fn ask(&self, _request: PermissionRequest) -> BoxFuture<'_, Answer> {
            Box::pin(async { Answer::No })
        }

        fn confirm<'a>(&'a self, question: &'a str) -> BoxFuture<'a, Option<bool>> {
            self.shown.lock().unwrap().push(question.to_owned());
            Box::pin(async { self.answer })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::person::Person;
    use super::*;
    use crate::config::ConfigFile;

    fn files(home: &Path, user: &str) -> Files {
        Files {
            user: ConfigFile::parse("config.toml", user).unwrap().trusted(),
            user_path: Some(home.join(".config/orchestrate/config.toml")),
            workspace: ConfigFile::parse(
                "orchestrate.toml",
                "[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n",
            )
            .unwrap(),
            workspace_path: "/w/orchestrate.toml".into(),
        }
    }

    #[tokio::test]
    async fn a_yes_on_the_terminal_is_remembered_and_a_no_is_not() {
        let home = tempfile::tempdir().unwrap();
        let config = home.path().join(".config/orchestrate/config.toml");
        let workspace = Path::new("/w");
        let person = Person::new;
        // Nobody to ask: refused, naming the flag.
        let nobody = person(None);
        let refused = check(false, workspace, &files(home.path(), ""), &nobody).await;
        let Err(
            e @ ConfigError::Untrusted {
                declined: false, ..
            },
        ) = refused
        else {
            panic!("{refused:?}")
        };
        assert!(e.to_string().contains("--trust-workspace"), "{e}");
        // A no: refused, shown the address, nothing remembered.
        let no = person(Some(false));
        let refused = check(false, workspace, &files(home.path(), ""), &no).await;
        assert!(matches!(
            refused,
            Err(ConfigError::Untrusted { declined: true, .. })
        ));
        assert_eq!(
            *no.shown.lock().unwrap(),
            [ui::trust::question(
                "/w/orchestrate.toml",
                &config::redirects(&files(home.path(), "").workspace)
            )]
        );
        assert!(!config.exists());
        // A yes: remembered, and the next check asks nothing.
        let yes = person(Some(true));
        assert_eq!(
            check(false, workspace, &files(home.path(), ""), &yes)
                .await
                .unwrap(),
            Vec::<String>::new()
        );
        let remembered = std::fs::read_to_string(&config).unwrap();
        let again = person(None);
        check(false, workspace, &files(home.path(), &remembered), &again)
            .await
            .unwrap();
        assert!(again.shown.lock().unwrap().is_empty());
        // The flag trusts without asking.
        let other = tempfile::tempdir().unwrap();
        let unasked = person(None);
        check(true, workspace, &files(other.path(), ""), &unasked)
            .await
            .unwrap();
        assert!(unasked.shown.lock().unwrap().is_empty());
        assert!(
            other
                .path()
                .join(".config/orchestrate/config.toml")
                .exists()
        );
    }

    #[test]
    fn a_trust_is_remembered_in_the_users_file_through_its_symlink() {
        let home = tempfile::tempdir().unwrap();
        let dotfiles = home.path().join("dotfiles/config.toml");
        std::fs::create_dir_all(dotfiles.parent().unwrap()).unwrap();
        std::fs::write(&dotfiles, "# mine\nmodel = \"m\"\n").unwrap();
        let dir = home.path().join(".config/orchestrate");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&dotfiles, dir.join("config.toml")).unwrap();
        rewrite(&dir.join("config.toml"), |t| {
            config::remember(t, "/w", &["http://x/v1"])
        })
        .unwrap();
        assert!(
            std::fs::symlink_metadata(dir.join("config.toml"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let text = std::fs::read_to_string(&dotfiles).unwrap();
        assert!(text.starts_with("# mine\nmodel = \"m\"\n"), "{text}");
        let user = config::ConfigFile::parse("config.toml", &text).unwrap();
        assert!(user.trusts("/w", "http://x/v1"));
        // No file yet, nor its directory: both are made.
        let fresh = home.path().join("fresh/.config/orchestrate/config.toml");
        rewrite(&fresh, |t| config::remember(t, "/w", &["http://x/v1"])).unwrap();
        let text = std::fs::read_to_string(&fresh).unwrap();
        assert!(
            config::ConfigFile::parse("config.toml", &text)
                .unwrap()
                .trusts("/w", "http://x/v1")
        );
    }
}
