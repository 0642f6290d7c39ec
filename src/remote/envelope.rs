//! A sub-agent's task as it crosses the wire: what the sub-agent needs
//! ([`RemoteTask`]), sealed by the lead that sends it ([`seal`]) and opened by
//! a worker only when its protocol is this binary's and its signature is by a
//! lead the worker trusts ([`open`]). Pure: keys and bytes in, a task or a
//! one-line refusal out.

use nkeys::KeyPair;
use serde::{Deserialize, Serialize};

use crate::protocol::SessionId;
use crate::tools::permissions::PermissionMode;

/// The version of what leads and workers say to each other. Binaries that
/// speak different versions refuse each other's tasks.
pub const PROTOCOL: u32 = 2;

/// What a remote sub-agent needs to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteTask {
    /// The run it belongs to (its lead's session).
    pub run: SessionId,
    /// The sub-agent's own session: its result carries this id, once.
    pub session: SessionId,
    /// The session that asked for it.
    pub parent: SessionId,
    /// Its role's name.
    pub role: String,
    /// Its role's prompt.
    pub system_prompt: String,
    /// The tools its role allows (`None`: every built-in tool).
    pub tools: Option<Vec<String>>,
    /// Model turns it may take.
    pub max_turns: u32,
    /// Its task, as its caller wrote it.
    pub prompt: String,
    /// The mode it runs in (a worker refuses one above its own cap).
    pub permission_mode: PermissionMode,
    /// The person's deny rules, in Claude Code's syntax.
    #[serde(default)]
    pub deny: Vec<String>,
    /// The person's ask rules.
    #[serde(default)]
    pub ask: Vec<String>,
    /// The worker tags it must be placed on (empty: any worker).
    #[serde(default)]
    pub tags: Vec<String>,
    /// When its role allows Bash only through rules: the commands it may run.
    #[serde(default)]
    pub bash: Vec<String>,
    /// When it stops being valid, in seconds since the Unix epoch: a task
    /// captured and published again later is refused.
    pub expires: u64,
    /// What must pass before its work counts: run on the worker when it
    /// answers as done, a failure sent back to it as a prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<RemoteCheck>,
    /// The tree it works on (none: it starts in an empty folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<super::workspace::Workspace>,
    /// When the run's hooks fire for it: its worker asks the lead to run
    /// them then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<crate::hooks::forward::Shape>,
}

impl RemoteTask {
    /// Its tree on a worker, fetched through `store` into `folder`
    /// (temporary files in `scratch`); `None` when it was sent none.
    pub fn tree<'a>(
        &'a self,
        store: &'a super::store::Store,
        scratch: &'a std::path::Path,
        folder: &'a std::path::Path,
    ) -> Option<super::workspace::Task<'a>> {
        Some(super::workspace::Task {
            store,
            scratch,
            run: self.run,
            session: self.session,
            workspace: self.workspace.as_ref()?,
            folder,
        })
    }
}

/// A task's check: a shell command run with its Bash tool (exit 0 passes),
/// at most `attempts` times.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteCheck {
    /// The command.
    pub command: String,
    /// How many times it may run.
    pub attempts: u32,
}

/// Why a worker will not run a task, and whether no worker ever will (one
/// another worker might run, it hands back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Why, in one line.
    pub why: String,
    /// Whether no worker would run it: it is ended for good.
    pub for_good: bool,
}

/// A sealed task: the task's exact bytes, the lead's public key and its
/// signature of them.
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    protocol: u32,
    #[serde(default)]
    lead: String,
    #[serde(default)]
    signature: String,
    task: String,
}

/// Now, in seconds since the Unix epoch, as a task's `expires` counts.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Seals `task` with the lead's `key`: the bytes to publish.
pub fn seal(task: &RemoteTask, key: &KeyPair) -> Result<Vec<u8>, String> {
    let task = serde_json::to_string(task).map_err(|e| e.to_string())?;
    let signature = key.sign(task.as_bytes()).map_err(|e| e.to_string())?;
    let envelope = Envelope {
        protocol: PROTOCOL,
        lead: key.public_key(),
        signature: hex(&signature),
        task,
    };
    serde_json::to_vec(&envelope).map_err(|e| e.to_string())
}

/// Opens a sealed task, `now` seconds after the Unix epoch: refused, with
/// why in one line, unless it speaks this protocol, is signed by one of the
/// `trusted` lead keys and has not expired. Another worker may run a task
/// this one refuses for its protocol or its lead; no worker runs the rest.
pub fn open(bytes: &[u8], trusted: &[String], now: u64) -> Result<(RemoteTask, String), Refusal> {
    let never = |why: String| Refusal {
        why,
        for_good: true,
    };
    let not_here = |why: String| Refusal {
        why,
        for_good: false,
    };
    let envelope: Envelope =
        serde_json::from_slice(bytes).map_err(|e| never(format!("not a task ({e})")))?;
    if envelope.protocol != PROTOCOL {
        return Err(not_here(format!(
            "the task speaks protocol {}, this worker {PROTOCOL}: run the same orchestrate version on the lead and its workers",
            envelope.protocol
        )));
    }
    if envelope.lead.is_empty() || envelope.signature.is_empty() {
        return Err(never("the task is not signed".into()));
    }
    if !trusted.contains(&envelope.lead) {
        return Err(not_here(format!(
            "the task is signed by {}, a lead this worker does not trust (--trust-lead)",
            envelope.lead
        )));
    }
    let key = KeyPair::from_public_key(&envelope.lead)
        .map_err(|e| never(format!("the task's lead key is not a key ({e})")))?;
    let signature = unhex(&envelope.signature)
        .ok_or_else(|| never("the task's signature is not hex".into()))?;
    key.verify(envelope.task.as_bytes(), &signature)
        .map_err(|_| never("the task's signature does not match it".into()))?;
    let task: RemoteTask = serde_json::from_str(&envelope.task)
        .map_err(|e| never(format!("the task does not read as a task ({e})")))?;
    if task.expires <= now {
        return Err(never(
            "the task has expired (it was sent again too late)".into(),
        ));
    }
    Ok((task, envelope.lead))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> RemoteTask {
        RemoteTask {
            run: SessionId::new(),
            session: SessionId::new(),
            parent: SessionId::new(),
            role: "coder".into(),
            system_prompt: "You are a coder.".into(),
            tools: Some(vec!["Read".into(), "Bash".into()]),
            max_turns: 20,
            prompt: "fix the parser".into(),
            permission_mode: PermissionMode::AcceptEdits,
            deny: vec!["Bash(rm:*)".into()],
            ask: Vec::new(),
            tags: vec!["gpu".into()],
            bash: Vec::new(),
            expires: NOW + 60,
            workspace: None,
            hooks: Vec::new(),
            check: None,
        }
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_sealed_task_opens_only_for_a_worker_trusting_its_lead() {
        let lead = KeyPair::new_user();
        let sealed = seal(&task(), &lead).unwrap();
        let trusted = vec![lead.public_key()];
        let (opened, by) = open(&sealed, &trusted, NOW).unwrap();
        assert_eq!(opened.prompt, "fix the parser");
        assert_eq!(by, lead.public_key());

        // Another worker may trust it: handed back, not ended.
        let stranger = KeyPair::new_user();
        let refused = open(&sealed, &[stranger.public_key()], NOW).unwrap_err();
        assert!(
            refused.why.contains("a lead this worker does not trust"),
            "{refused:?}"
        );
        assert!(!refused.for_good);

        // Sent again after it expired: refused for good.
        let late = open(&sealed, &trusted, NOW + 60).unwrap_err();
        assert!(
            late.why.contains("has expired") && late.for_good,
            "{late:?}"
        );

        // Changed on the way: the signature no longer matches.
        let text = String::from_utf8(sealed.clone()).unwrap();
        let changed = text.replace("fix the parser", "rm -rf ~ now!!");
        let why = open(changed.as_bytes(), &trusted, NOW).unwrap_err();
        assert_eq!(why.why, "the task's signature does not match it");

        // Signed by another key that claims to be the lead.
        let forged = seal(&task(), &stranger).unwrap();
        let claimed = String::from_utf8(forged)
            .unwrap()
            .replace(&stranger.public_key(), &lead.public_key());
        let why = open(claimed.as_bytes(), &trusted, NOW).unwrap_err();
        assert_eq!(why.why, "the task's signature does not match it");
    }

    #[test]
    fn an_unsigned_or_foreign_task_is_refused_in_one_line() {
        let trusted = vec![KeyPair::new_user().public_key()];
        let task = serde_json::to_string(&task()).unwrap();
        let unsigned = serde_json::json!({"protocol": PROTOCOL, "task": task}).to_string();
        let unsigned = open(unsigned.as_bytes(), &trusted, NOW).unwrap_err();
        assert_eq!(unsigned.why, "the task is not signed");
        assert!(unsigned.for_good);
        let newer = serde_json::json!({"protocol": PROTOCOL + 1, "task": task}).to_string();
        let other = open(newer.as_bytes(), &trusted, NOW).unwrap_err();
        assert!(
            other.why.contains("run the same orchestrate version"),
            "{other:?}"
        );
        assert!(!other.for_good, "a worker of that version may run it");
        let garbage = open(b"\x00garbage", &trusted, NOW).unwrap_err();
        assert!(garbage.why.starts_with("not a task"));
    }

    #[test]
    fn hex_reads_back_and_refuses_what_is_not_hex() {
        let bytes = [0u8, 1, 171, 255];
        assert_eq!(unhex(&hex(&bytes)).unwrap(), bytes);
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("é1"), None);
    }
}
