//! Which providers and models to use: flags over the environment over the
//! configuration files (`orchestrate.toml` in the workspace, then
//! `~/.config/orchestrate/config.toml`). Pure: the environment and the files' text
//! are passed in, so every rule has a unit test.
//!
//! ```toml
//! provider = "anthropic"        # the default provider (else chosen from the keys)
//! model = "smart"               # the default model: an alias or an id
//! nats = "nats://h1:4222"       # where sub-agents may run (only in the user's own file)
//!
//! [providers.local]             # a provider of your own, by name
//! kind = "openai"               # openai | anthropic
//! base_url = "http://localhost:11434/v1"
//! api_key_env = "LOCAL_KEY"     # the variable holding its key, if it needs one
//!
//! [models]
//! fast = "claude-haiku-4-5"                        # an id on the default provider
//! smart = { provider = "anthropic", model = "claude-sonnet-4-5" }
//!
//! [sandbox]                     # only in the user's own file
//! mode = "workspace-write"      # or "off"
//! writable = ["~/.cache"]       # more places Bash commands may write
//!
//! [approval]                    # only in the user's own file: who answers questions
//! url = "https://approvals.example.com/ask"   # or command = ["ask-phone", "--team"]
//! token = "…"                   # sent as a bearer token
//! timeout = "2m"                # then the answer is no
//! ```
//!
//! What a file may declare is [`ConfigFile`], the result is [`Settings`], and
//! [`resolve()`] holds the rules that turn flags, environment and files into it.
//! A workspace's file that sends requests elsewhere needs the user's trust
//! ([`redirects`], [`ConfigFile::trusts`], [`remember`]). Reading the files from
//! disk, asking, and building clients from the settings is the caller's job (the
//! CLI's).

mod file;
mod resolve;
mod settings;
mod trust;

pub use self::file::{
    ApprovalEntry, CompactionEntry, ConfigFile, ModelEntry, ProviderEntry, SandboxEntry,
    TrustedWorkspace,
};
pub use self::resolve::{
    DEFAULT_ANTHROPIC_MODEL, DEFAULT_COMPACT_AT, DEFAULT_OPENAI_MODEL, Flags, resolve,
};
pub use self::settings::{ModelRef, ProviderKind, ProviderSettings, Settings};
pub use self::trust::{Redirect, pin_rules, redirects, remember, trust_mcp};
