//! Where a workspace's own configuration may send requests. A cloned repository's
//! `orchestrate.toml` that gives a provider a `base_url` sends the person's task,
//! every file the agents read and every command's output there, and whatever answers
//! drives the tools: such a file is obeyed only in a workspace the user trusts with
//! those addresses, in their own file:
//!
//! ```toml
//! [trust."/home/me/src/project"]
//! base_urls = ["http://localhost:11434/v1"]
//! ```
//!
//! Pure: which addresses a file sends requests to ([`redirects`]), which of them the
//! user's file trusts ([`ConfigFile::trusts`]), and the text of the user's file with
//! a trust added ([`remember`]). Reading, asking and writing are the CLI's.

use std::collections::BTreeSet;

use super::file::ConfigFile;
use super::settings::ProviderKind;
use crate::llm::{anthropic, openai};

/// A provider a workspace's file sends somewhere of its own choosing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// The provider's name.
    pub provider: String,
    /// Where the file sends its requests.
    pub base_url: String,
}

/// Every provider `workspace_file` points at an address that is not its vendor's
/// own API (an unknown kind counts as no vendor's).
pub fn redirects(workspace_file: &ConfigFile) -> Vec<Redirect> {
    workspace_file
        .providers
        .iter()
        .filter_map(|(name, entry)| {
            let url = entry.base_url.as_ref()?;
            let vendors = match ProviderKind::parse(entry.kind.as_deref().unwrap_or(name)) {
                Some(ProviderKind::OpenAi) => Some(openai::DEFAULT_BASE_URL),
                Some(ProviderKind::Anthropic) => Some(anthropic::DEFAULT_BASE_URL),
                None => None,
            };
            (vendors != Some(url.trim().trim_end_matches('/'))).then(|| Redirect {
                provider: name.clone(),
                base_url: url.clone(),
            })
        })
        .collect()
}

impl ConfigFile {
    /// Whether this (the user's own) file trusts the workspace at `workspace` to
    /// send requests to `base_url`.
    pub fn trusts(&self, workspace: &str, base_url: &str) -> bool {
        self.trust
            .get(workspace)
            .is_some_and(|t| t.base_urls.iter().any(|u| u == base_url))
    }
}

/// The user's file `text` with `workspace` trusted to send requests to `base_urls`
/// too; everything else in it (comments included) stays as it was.
pub fn remember(text: &str, workspace: &str, base_urls: &[&str]) -> Result<String, String> {
    remember_list(text, workspace, "base_urls", base_urls)
}

/// The user's file `text` with `rules` pinned for `workspace`: allow rules of its
/// `.claude/settings.local.json` that the person approved ("always"), which count
/// even though the workspace is not trusted as a whole.
pub fn pin_rules(text: &str, workspace: &str, rules: &[&str]) -> Result<String, String> {
    remember_list(text, workspace, "rules", rules)
}

/// The user's file `text` with `servers` (their [`crate::mcp::ServerConfig::trust_key`])
/// trusted for `workspace`: its `.mcp.json` and its roles may start them.
pub fn trust_mcp(text: &str, workspace: &str, servers: &[&str]) -> Result<String, String> {
    remember_list(text, workspace, "mcp_servers", servers)
}

impl ConfigFile {
    /// Whether this (the user's own) file trusts the workspace at `workspace` to
    /// start the MCP server `key` ([`crate::mcp::ServerConfig::trust_key`]).
    pub fn trusts_mcp(&self, workspace: &str, key: &str) -> bool {
        self.trust
            .get(workspace)
            .is_some_and(|t| t.mcp_servers.iter().any(|k| k == key))
    }
}

fn remember_list(
    text: &str,
    workspace: &str,
    key: &str,
    base_urls: &[&str],
) -> Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    let trust = doc
        .entry("trust")
        .or_insert_with(|| {
            let mut table = toml_edit::Table::new();
            table.set_implicit(true);
            toml_edit::Item::Table(table)
        })
        .as_table_mut()
        .ok_or("`trust` is not a table")?;
    let entry = trust
        .entry(workspace)
        .or_insert_with(toml_edit::table)
        .as_table_like_mut()
        .ok_or_else(|| format!("trust.{workspace:?} is not a table"))?;
    let urls = entry
        .entry(key)
        .or_insert_with(|| toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or_else(|| format!("trust.{workspace:?}.{key} is not an array"))?;
    let known: BTreeSet<String> = urls
        .iter()
        .filter_map(|u| u.as_str().map(str::to_owned))
        .collect();
    for url in base_urls {
        if !known.contains(*url) {
            urls.push(*url);
        }
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::parse("orchestrate.toml", text).unwrap()
    }

    #[test]
    fn only_addresses_other_than_the_vendors_own_are_redirects() {
        let f = file(
            "[providers.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             [providers.anthropic]\nbase_url = \"https://api.anthropic.com/\"\n\
             [providers.claude]\nkind = \"anthropic\"\nbase_url = \"https://proxy.example\"\n\
             [providers.big]\nkind = \"anthropic\"\nmax_tokens = 64000\n",
        );
        assert_eq!(
            redirects(&f),
            [
                Redirect {
                    provider: "claude".into(),
                    base_url: "https://proxy.example".into()
                },
                Redirect {
                    provider: "openai".into(),
                    base_url: "http://127.0.0.1:9/v1".into()
                },
            ]
        );
        assert_eq!(redirects(&file("provider = \"anthropic\"\n")), []);
    }

    #[test]
    fn a_remembered_trust_is_read_back_and_the_rest_of_the_file_kept() {
        let before = "# my settings\nmodel = \"fast\" # the usual\n";
        let once = remember(before, "/src/a \"quoted\"", &["http://x/v1"]).unwrap();
        assert_eq!(
            once,
            "# my settings\nmodel = \"fast\" # the usual\n\n[trust.'/src/a \"quoted\"']\nbase_urls = [\"http://x/v1\"]\n"
        );
        // Again, with one address known and one new: each is there once.
        let twice = remember(&once, "/src/a \"quoted\"", &["http://x/v1", "http://y"]).unwrap();
        let user = ConfigFile::parse("config.toml", &twice).unwrap();
        assert_eq!(
            user.trust["/src/a \"quoted\""].base_urls,
            ["http://x/v1", "http://y"]
        );
        assert!(user.trusts("/src/a \"quoted\"", "http://y"));
        assert!(!user.trusts("/src/b", "http://y"));
        assert!(!user.trusts("/src/a \"quoted\"", "http://z"));
        assert_eq!(user.model.as_deref(), Some("fast"));
        // An empty or missing file starts one.
        let fresh = remember("", "/w", &["http://x"]).unwrap();
        assert!(
            ConfigFile::parse("config.toml", &fresh)
                .unwrap()
                .trusts("/w", "http://x")
        );
        // A file that is not TOML is not overwritten.
        assert!(remember("model = ", "/w", &["http://x"]).is_err());
    }

    #[test]
    fn a_workspace_file_cannot_trust_itself() {
        let user = file("model = \"m\"\n");
        let workspace = file("[trust.\"/w\"]\nbase_urls = [\"http://evil\"]\n");
        assert!(!user.merged(workspace).trusts("/w", "http://evil"));
    }
}
