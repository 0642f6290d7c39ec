//! Provider keys: which environment variables hold them, and keeping their values
//! out of the process's initial environment block.
//!
//! Removing a variable from the environment at run time changes nothing a child can
//! see: the kernel serves `/proc/<pid>/environ` from the block the process was
//! started with. So at start, when any key variable is set, the binary runs itself
//! again ([`take_from_environment`]) with those variables removed and their values
//! in an anonymous memory file whose descriptor number travels in
//! [`HANDOFF_FD_VAR`]; the new image reads them into memory ([`Keys`]) and closes
//! the file. The keys then live only in the process's memory, which a
//! non-dumpable process keeps from tool children (see `tools::bash::launcher`).
//!
//! A key variable is any whose name ends in `_API_KEY` (any case), a handful of
//! other provider credentials, and every `api_key_env` the user's own configuration
//! names. It does not decide which key goes to which provider (`config`).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::config::ConfigFile;

/// Provider credentials that are key variables besides `*_API_KEY`, and what
/// a lead or a worker joins NATS with: none reaches a tool's command.
const NAMED_SECRETS: [&str; 7] = [
    "NATS_TOKEN",
    "NATS_NKEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AZURE_OPENAI_AD_TOKEN",
    "OPENAI_ADMIN_KEY",
];

/// Names the descriptor the keys arrive on in the re-executed image. Not a secret:
/// a number. Tool children never see it (`tools::bash`).
pub const HANDOFF_FD_VAR: &str = "ORCHESTRATE_KEYS_FD";

/// The memory file's name, and how `/proc/self/fd/N` shows it.
const HANDOFF_NAME: &str = "orchestrate-keys";
const HANDOFF_LINK: &str = "/memfd:orchestrate-keys";

/// Whether the variable `name` holds a provider key: `*_API_KEY` in any case, the
/// named provider credentials, or one of `configured` (the `api_key_env` names).
pub fn is_key_variable(name: &OsStr, configured: &[String]) -> bool {
    let name = name.to_string_lossy();
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_API_KEY")
        || NAMED_SECRETS.contains(&upper.as_str())
        || configured.iter().any(|c| *c == name)
}

/// The `api_key_env` names of the user's own configuration file
/// (`$HOME/.config/orchestrate/config.toml`); none when it is missing or does not
/// parse (the run reports that itself, later). A repository's file may not name
/// key variables, so it is not read.
pub fn configured_names(home: Option<&Path>) -> Vec<String> {
    let Some(home) = home else {
        return Vec::new();
    };
    let path = home.join(".config/orchestrate/config.toml");
    let Ok(text) = crate::small_file::read_own(&path, crate::small_file::MAX_BYTES) else {
        return Vec::new();
    };
    ConfigFile::parse(&path.display().to_string(), &text)
        .map(|file| file.key_variables())
        .unwrap_or_default()
}

/// Provider keys held in memory, by variable name.
#[derive(Clone, Default)]
pub struct Keys(BTreeMap<String, String>);

impl std::fmt::Debug for Keys {
    // Names only: a debug print must not show a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Keys {
    /// The value of key variable `name`, if it was set.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    /// The keys in the form they are handed over in: `NAME=value\0` each.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in &self.0 {
            out.extend_from_slice(name.as_bytes());
            out.push(b'=');
            out.extend_from_slice(value.as_bytes());
            out.push(0);
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut keys = BTreeMap::new();
        for entry in bytes.split(|b| *b == 0).filter(|e| !e.is_empty()) {
            let text = std::str::from_utf8(entry)
                .map_err(|_| "a handed-over key is not UTF-8".to_owned())?;
            let (name, value) = text
                .split_once('=')
                .ok_or_else(|| "a handed-over key has no name".to_owned())?;
            keys.insert(name.to_owned(), value.to_owned());
        }
        Ok(Self(keys))
    }
}

/// What [`take_from_environment`] could do.
#[derive(Debug)]
pub enum Taken {
    /// The keys are in memory only: handed over by the previous image, or there
    /// were none.
    Held(Keys),
    /// Something failed, said why: the binary could not run itself again (the keys
    /// are here and still in the environment block), or could not read what the
    /// previous image handed over (they are lost).
    Failed(Keys, String),
}

/// Takes the key variables out of the process's environment block: in the
/// re-executed image, reads the keys handed over; else, when any key variable
/// is set, runs the binary again (`/proc/self/exe`, same arguments) without them,
/// which does not return unless it fails. `configured` are the `api_key_env`
/// names ([`configured_names`]). Call it first thing in `main`, before any thread
/// starts.
pub fn take_from_environment(configured: &[String]) -> Taken {
    if let Some(fd) = std::env::var_os(HANDOFF_FD_VAR) {
        return match receive(&fd) {
            Ok(keys) => Taken::Held(keys),
            Err(e) => Taken::Failed(
                Keys::default(),
                format!("cannot read the provider keys handed over at start: {e}"),
            ),
        };
    }
    let mut keys = BTreeMap::new();
    for (name, value) in std::env::vars_os() {
        // A value that is not UTF-8 is no key a provider can use; it stays (and
        // tool children still never see it).
        if is_key_variable(&name, configured)
            && let (Ok(name), Ok(value)) = (name.into_string(), value.into_string())
        {
            keys.insert(name, value);
        }
    }
    let keys = Keys(keys);
    if keys.0.is_empty() {
        return Taken::Held(keys);
    }
    let error = reexec_without(&keys);
    Taken::Failed(keys, error)
}

/// Runs `/proc/self/exe` again with `keys` removed from its environment and handed
/// over in a memory file; returns only on failure, saying why.
fn reexec_without(keys: &Keys) -> String {
    let file = match handoff_file(keys) {
        Ok(file) => file,
        Err(e) => {
            return format!(
                "cannot hand the provider keys over ({e}): they stay in this process's environment block"
            );
        }
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("orchestrate"));
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0(arg0)
        .args(args)
        .env(HANDOFF_FD_VAR, fd.to_string());
    for name in keys.0.keys() {
        command.env_remove(name);
    }
    let error = command.exec();
    format!(
        "cannot run itself again without the provider keys in its environment ({error}): they stay in its environment block"
    )
}

/// An anonymous memory file holding the encoded keys, rewound, left open across
/// `exec`.
fn handoff_file(keys: &Keys) -> std::io::Result<std::fs::File> {
    let flags = rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING;
    let fd = rustix::fs::memfd_create(HANDOFF_NAME, flags)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&keys.encode())?;
    file.rewind()?;
    rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty())?;
    Ok(file)
}

/// Reads the handed-over file named by `fd`, then empties and seals it.
///
/// The inherited descriptor itself stays open (closing a descriptor known only by
/// its number needs `unsafe`, which this crate forbids), and children inherit it:
/// so the file it refers to is truncated to nothing and sealed, and a child that
/// reads it gets end-of-file.
fn receive(fd: &OsStr) -> Result<Keys, String> {
    let raw: u32 = fd
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 2)
        .ok_or_else(|| format!("{HANDOFF_FD_VAR} is not a descriptor number"))?;
    let path = format!("/proc/self/fd/{raw}");
    // Only the file the previous image made is emptied, never whatever a stray
    // variable happens to name.
    let target = std::fs::read_link(&path).map_err(|e| format!("{path}: {e}"))?;
    if !target
        .as_os_str()
        .as_encoded_bytes()
        .starts_with(HANDOFF_LINK.as_bytes())
    {
        return Err(format!("{path} is not the keys' file"));
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    let mut bytes = Vec::new();
    let read = file.read_to_end(&mut bytes);
    let emptied = file.set_len(0);
    read.map_err(|e| format!("{path}: {e}"))?;
    emptied.map_err(|e| format!("cannot empty {path}: {e}"))?;
    let seals = rustix::fs::SealFlags::SEAL
        | rustix::fs::SealFlags::GROW
        | rustix::fs::SealFlags::WRITE
        | rustix::fs::SealFlags::SHRINK;
    rustix::fs::fcntl_add_seals(&file, seals).map_err(|e| format!("cannot seal {path}: {e}"))?;
    Keys::decode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_variables_are_api_keys_named_credentials_and_configured_names() {
        let configured = ["LOCAL_LLM_SECRET".to_owned()];
        for name in [
            "OPENAI_API_KEY",
            "anthropic_api_key",
            "GROQ_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "LOCAL_LLM_SECRET",
        ] {
            assert!(is_key_variable(OsStr::new(name), &configured), "{name}");
        }
        for name in ["PATH", "API_KEY_FILE", "local_llm_secret", "GITHUB_TOKEN"] {
            assert!(!is_key_variable(OsStr::new(name), &configured), "{name}");
        }
    }

    #[test]
    fn keys_survive_their_handoff_and_never_show_in_a_debug_print() {
        let keys = Keys(BTreeMap::from([
            ("OPENAI_API_KEY".to_owned(), "sk-a=b\nc".to_owned()),
            ("EMPTY_API_KEY".to_owned(), String::new()),
        ]));
        let back = Keys::decode(&keys.encode()).unwrap();
        assert_eq!(back.get("OPENAI_API_KEY").as_deref(), Some("sk-a=b\nc"));
        assert_eq!(back.get("EMPTY_API_KEY").as_deref(), Some(""));
        assert_eq!(back.get("PATH"), None);
        assert_eq!(
            format!("{back:?}"),
            r#"{"EMPTY_API_KEY", "OPENAI_API_KEY"}"#
        );
        assert!(Keys::decode(b"no equals sign\0").is_err());
    }

    #[test]
    fn the_user_files_api_key_env_names_are_read() {
        let home = tempfile::tempdir().unwrap();
        assert!(configured_names(Some(home.path())).is_empty());
        let dir = home.path().join(".config/orchestrate");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.toml"),
            "[providers.local]\nkind = \"openai\"\nbase_url = \"http://localhost:1/v1\"\napi_key_env = \"LOCAL_KEY\"\n",
        )
        .unwrap();
        assert_eq!(configured_names(Some(home.path())), ["LOCAL_KEY"]);
        std::fs::write(dir.join("config.toml"), "not toml [").unwrap();
        assert!(configured_names(Some(home.path())).is_empty());
    }
}
