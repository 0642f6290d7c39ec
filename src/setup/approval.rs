//! The approver of the user's own configuration (`[approval]`): a program or
//! an endpoint that answers permission questions instead of the terminal.

use std::sync::Arc;

use crate::config::ConfigFile;
use crate::error::ConfigError;
use crate::tools::permissions::Approver;
use crate::tools::permissions::forward::{DEFAULT_TIMEOUT, Destination, Forwarder};

/// The forwarding approver `user`'s file names, if it names one.
pub(super) fn forwarder(user: &ConfigFile) -> Result<Option<Arc<dyn Approver>>, ConfigError> {
    let Some(entry) = &user.approval else {
        return Ok(None);
    };
    let bad = |why: String| ConfigError::Invalid(format!("[approval] {why}"));
    let to = match (&entry.command, &entry.url) {
        (Some(argv), None) => Destination::Program(argv.clone()),
        (None, Some(url)) => Destination::Http {
            url: reqwest::Url::parse(url).map_err(|e| bad(format!("url {url:?}: {e}")))?,
            token: entry.token.clone(),
        },
        (Some(_), Some(_)) => return Err(bad("names both a command and a url; keep one".into())),
        (None, None) => return Err(bad("names neither a command nor a url".into())),
    };
    let timeout = match &entry.timeout {
        Some(text) => crate::session::budget::parse_duration(text)
            .map_err(|e| bad(format!("timeout: {e}")))?,
        None => DEFAULT_TIMEOUT,
    };
    let forwarder = Forwarder::new(to, timeout).map_err(bad)?;
    Ok(Some(Arc::new(forwarder)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Option<Arc<dyn Approver>>, String> {
        let file = ConfigFile::parse("config.toml", text).map_err(|e| e.to_string())?;
        forwarder(&file).map_err(|e| e.to_string())
    }

    #[test]
    fn the_approval_table_names_one_program_or_one_secure_endpoint() {
        assert!(read("").unwrap().is_none());
        let program = read("[approval]\ncommand = [\"ask-phone\", \"--team\"]\n").unwrap();
        assert_eq!(program.unwrap().name(), "program");
        let http =
            "[approval]\nurl = \"https://a.example/ask\"\ntoken = \"t\"\ntimeout = \"30s\"\n";
        assert_eq!(read(http).unwrap().unwrap().name(), "http");
        let both = read("[approval]\ncommand = [\"a\"]\nurl = \"https://a.example\"\n");
        assert!(both.unwrap_err().contains("both a command and a url"));
        let neither = read("[approval]\ntoken = \"t\"\n").unwrap_err();
        assert!(neither.contains("neither a command nor a url"), "{neither}");
        let plain = read("[approval]\nurl = \"http://a.example/ask\"\n").unwrap_err();
        assert!(plain.contains("must be https"), "{plain}");
        let slow = read("[approval]\ncommand = [\"a\"]\ntimeout = \"soon\"\n").unwrap_err();
        assert!(slow.contains("[approval] timeout:"), "{slow}");
    }
}
