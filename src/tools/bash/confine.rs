//! The policy Bash commands run under, as the orchestrator decides it: which key
//! variables their environment never holds, whether they start through the
//! `launcher` (only from the `orchestrate` binary), in a user namespace of their own
//! (where the kernel allows it), and under Landlock with writes allowed only under
//! the workspace, the temporary directory and the paths the user's configuration
//! adds (`--sandbox workspace-write`, the default) or not at all confined (`off`).
//! What this kernel allows is asked once, at start, of the launcher's `probe`.
//!
//! It does not start anything itself (`group`, `launcher`).

use std::path::{Path, PathBuf};

use super::launcher::{self, Spec};

/// Where Bash commands may write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxMode {
    /// Under the workspace, the temporary directory and the configured paths only.
    #[default]
    WorkspaceWrite,
    /// Anywhere the user may.
    Off,
}

impl std::str::FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "workspace-write" => Ok(Self::WorkspaceWrite),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "unknown sandbox mode {other:?} (expected workspace-write or off)"
            )),
        }
    }
}

/// How one Bash tool starts its commands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Key variables removed from the command's environment besides the built-in
    /// ones (`keys::is_key_variable`): the configured `api_key_env` names.
    pub key_variables: Vec<String>,
    /// Through the launcher, and how; `None`: the shell is started directly, in a
    /// process group of its own, unconfined (a program using the library).
    pub launch: Option<Launch>,
    /// Why every command is refused: the sandbox the mode asks for cannot be
    /// had on this machine (never run unprotected in silence).
    pub refused: Option<String>,
}

/// What the launcher does for each command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    /// Start the shell in a user namespace of its own.
    pub user_namespace: bool,
    /// Apply Landlock with writes allowed under the workspace and these paths;
    /// `None`: writes are not confined.
    pub writable: Option<Vec<PathBuf>>,
}

impl Launch {
    /// The launcher's instructions for `command` run in `workspace`, with
    /// `private` hidden from it (in a user namespace only: without one, a mount
    /// namespace cannot be had). `checkout`: the private checkout the workspace
    /// is in (an isolated sub-agent's), which the command may write whole and
    /// which stays visible inside the private place that holds it.
    pub(super) fn spec(
        &self,
        command: &str,
        workspace: &Path,
        checkout: Option<&Path>,
        private: &[PathBuf],
    ) -> Spec {
        let own = checkout.unwrap_or(workspace);
        let (hidden, shown) = match self.user_namespace {
            true => {
                // A place that holds the workspace is hidden only when it is a
                // private checkout's (the checkout shown through it); any other
                // is left: the command works there.
                let hidden: Vec<PathBuf> = private
                    .iter()
                    .filter(|place| checkout.is_some() || !own.starts_with(place))
                    .filter(|place| place.parent().is_some())
                    .cloned()
                    .collect();
                let shown = checkout
                    .filter(|c| hidden.iter().any(|place| c.starts_with(place)))
                    .map(Path::to_path_buf);
                (hidden, shown)
            }
            false => (Vec::new(), None),
        };
        Spec {
            user_namespace: self.user_namespace,
            hidden,
            shown,
            writable: self.writable.as_ref().map(|paths| {
                std::iter::once(own.to_path_buf())
                    .chain(paths.iter().cloned())
                    .collect()
            }),
            command: command.to_owned(),
        }
    }
}

impl Confinement {
    /// The confinement for this process: through the launcher when the running
    /// binary is `orchestrate` (see [`launcher::enable`]), with a user namespace
    /// and Landlock where the kernel allows them, asked of the launcher's probe.
    /// Returns what the kernel does not allow, said once for the person at start.
    pub fn for_this_process(
        mode: SandboxMode,
        writable: Vec<PathBuf>,
        key_variables: Vec<String>,
    ) -> (Self, Vec<String>) {
        let mut confinement = Self {
            key_variables,
            launch: None,
            refused: None,
        };
        if !launcher::enabled() {
            return (confinement, Vec::new());
        }
        let (userns, landlock) = match probe() {
            Ok(answers) => answers,
            Err(e) => (e.clone(), e),
        };
        let (launch, notes) = Launch::from_probe(mode, writable, &userns, &landlock);
        if mode == SandboxMode::WorkspaceWrite && launch.writable.is_none() {
            confinement.refused = notes.first().cloned();
        }
        confinement.launch = Some(launch);
        (confinement, notes)
    }
}

impl Launch {
    /// What the launcher does given the probe's answers (`userns`: `ok` or why not;
    /// `landlock`: `full`, `partial`, `none` or why not), and what to tell the
    /// person about what it cannot do. `workspace-write` needs both a user
    /// namespace and Landlock of ABI 5 or later; without them nothing is
    /// confined (`writable` is `None`) and the note says commands are refused.
    fn from_probe(
        mode: SandboxMode,
        writable: Vec<PathBuf>,
        userns: &str,
        landlock: &str,
    ) -> (Self, Vec<String>) {
        let mut notes = Vec::new();
        let confined = mode == SandboxMode::WorkspaceWrite;
        let missing = match (userns, landlock) {
            ("ok", "full") => None,
            (userns, _) if userns != "ok" => Some(format!("no user namespaces: {userns}")),
            (_, "partial") => Some("this kernel's Landlock is older than version 5".to_owned()),
            (_, "none") => Some("this kernel has no Landlock".to_owned()),
            (_, error) => Some(format!("Landlock cannot be applied: {error}")),
        };
        match (&missing, confined) {
            (Some(why), true) => notes.push(format!(
                "the sandbox cannot be had here ({why}): Bash commands are refused; pass --sandbox off to run them unconfined"
            )),
            (_, false) if userns != "ok" => notes.push(format!(
                "user namespaces are not available here ({userns}): Bash commands run in orchestrate's own, can see orchestrate's state folder, and as root could read its memory, keys included"
            )),
            _ => {}
        }
        let mut paths = vec![std::env::temp_dir()];
        paths.extend(writable);
        let launch = Self {
            user_namespace: userns == "ok",
            writable: (confined && missing.is_none()).then_some(paths),
        };
        (launch, notes)
    }
}

/// Runs the launcher's probe: its answers for user namespaces and Landlock.
fn probe() -> Result<(String, String), String> {
    let output = std::process::Command::new(launcher::executable())
        .args([launcher::MARK, "probe"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run the probe: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let answer = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .map(str::to_owned)
    };
    match (answer("userns"), answer("landlock")) {
        (Some(userns), Some(landlock)) => Ok((userns, landlock)),
        _ => Err(format!("the probe failed: {}", output.status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_kernel_allows_is_used_and_what_it_does_not_is_said() {
        let extra = || vec![PathBuf::from("/var/cache/x")];
        let tmp = std::env::temp_dir();
        let (launch, notes) =
            Launch::from_probe(SandboxMode::WorkspaceWrite, extra(), "ok", "full");
        assert_eq!(
            launch,
            Launch {
                user_namespace: true,
                writable: Some(vec![tmp.clone(), "/var/cache/x".into()]),
            }
        );
        assert!(notes.is_empty(), "{notes:?}");

        // No user namespace: workspace-write refuses commands, and says so once.
        let denied = "Operation not permitted (os error 1)";
        let (launch, notes) =
            Launch::from_probe(SandboxMode::WorkspaceWrite, extra(), denied, "full");
        assert_eq!(launch, Launch::default());
        assert_eq!(
            notes,
            [format!(
                "the sandbox cannot be had here (no user namespaces: {denied}): Bash commands are refused; pass --sandbox off to run them unconfined"
            )]
        );
        // Landlock older than ABI 5, or none: the same.
        for (landlock, why) in [
            ("partial", "this kernel's Landlock is older than version 5"),
            ("none", "this kernel has no Landlock"),
        ] {
            let (launch, notes) =
                Launch::from_probe(SandboxMode::WorkspaceWrite, extra(), "ok", landlock);
            assert_eq!(launch.writable, None);
            assert_eq!(
                notes,
                [format!(
                    "the sandbox cannot be had here ({why}): Bash commands are refused; pass --sandbox off to run them unconfined"
                )]
            );
        }

        // Off: nothing to say about Landlock, and none applied; the user
        // namespace still keeps orchestrate's state out of sight.
        let (launch, notes) = Launch::from_probe(SandboxMode::Off, extra(), "ok", "none");
        assert_eq!(
            launch,
            Launch {
                user_namespace: true,
                writable: None,
            }
        );
        assert!(notes.is_empty(), "{notes:?}");
        let (launch, notes) = Launch::from_probe(SandboxMode::Off, extra(), denied, "none");
        assert_eq!(launch, Launch::default());
        assert_eq!(
            notes,
            [format!(
                "user namespaces are not available here ({denied}): Bash commands run in orchestrate's own, can see orchestrate's state folder, and as root could read its memory, keys included"
            )]
        );
    }

    #[test]
    fn the_workspace_comes_first_among_the_writable_paths() {
        let launch = Launch {
            user_namespace: false,
            writable: Some(vec!["/tmp".into()]),
        };
        let private = [PathBuf::from("/h/.local/state/orchestrate"), "/w/s".into()];
        let spec = launch.spec("make", Path::new("/w"), None, &private);
        assert_eq!(spec.writable, Some(vec!["/w".into(), "/tmp".into()]));
        assert_eq!(spec.command, "make");
        // Without a user namespace nothing can be hidden.
        assert!(spec.hidden.is_empty());
        let unconfined = Launch::default().spec("make", Path::new("/w"), None, &private);
        assert_eq!(unconfined.writable, None);
        let namespaced = Launch {
            user_namespace: true,
            writable: None,
        };
        assert_eq!(
            namespaced
                .spec("make", Path::new("/w"), None, &private)
                .hidden,
            private
        );
        // A place that holds the workspace is not hidden from it.
        let around = [PathBuf::from("/"), "/w".into()];
        assert!(
            namespaced
                .spec("make", Path::new("/w/x"), None, &around)
                .hidden
                .is_empty()
        );
        // A private checkout in the state root: the state hidden, the checkout
        // shown through it and writable whole, from a folder inside it.
        let state = PathBuf::from("/h/.local/state/orchestrate");
        let checkout = state.join("k/checkouts/c1");
        let isolated = Launch {
            user_namespace: true,
            writable: Some(vec!["/tmp".into()]),
        }
        .spec(
            "make",
            &checkout.join("sub"),
            Some(&checkout),
            std::slice::from_ref(&state),
        );
        assert_eq!(isolated.hidden, vec![state]);
        assert_eq!(isolated.shown, Some(checkout.clone()));
        assert_eq!(isolated.writable, Some(vec![checkout, "/tmp".into()]));
    }

    #[test]
    fn sandbox_modes_parse_by_name() {
        assert_eq!("off".parse(), Ok(SandboxMode::Off));
        assert_eq!("workspace-write".parse(), Ok(SandboxMode::WorkspaceWrite));
        assert_eq!(
            "read-only".parse::<SandboxMode>(),
            Err("unknown sandbox mode \"read-only\" (expected workspace-write or off)".to_owned())
        );
    }
}
