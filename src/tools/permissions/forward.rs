//! An approver that forwards each question to what the user's own
//! configuration names (`[approval]`): a program, given the question as one
//! JSON line on its stdin, or an HTTP endpoint (https, or http on loopback),
//! given it as a POST with the configured token. Either answers with
//! `{"question_id": …, "answer": "yes" | "no" | "always"}` (a program, on its
//! first line): an answer is taken only for the question it names, and
//! anything else (an error, no answer within the timeout) is a no, whose
//! reason the refusal says. Only an answer of no is the person's, ending the
//! turn. Questions go out as they come, not one at a time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use super::{Answer, Approver, PermissionMode, PermissionRequest, mode_allowing};

/// How long an approver may take by default before the answer is no.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The most of an answer read.
const ANSWER_BYTES: u64 = 64 * 1024;

/// Where questions go.
#[derive(Clone)]
pub enum Destination {
    /// A program and its arguments.
    Program(Vec<String>),
    /// An endpoint, and the token sent as `Authorization: Bearer`.
    Http {
        /// The endpoint.
        url: reqwest::Url,
        /// The token.
        token: Option<String>,
    },
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is never shown.
        match self {
            Self::Program(argv) => f.debug_tuple("Program").field(argv).finish(),
            Self::Http { url, token } => f
                .debug_struct("Http")
                .field("url", &origin(url))
                .field("token", &token.as_ref().map(|_| "…"))
                .finish(),
        }
    }
}

/// A URL's scheme, host and port: what may be said of it (its path and
/// query may hold a secret).
fn origin(url: &reqwest::Url) -> String {
    url.origin().ascii_serialization()
}

/// Forwards questions to a [`Destination`].
pub struct Forwarder {
    to: Destination,
    timeout: Duration,
    client: reqwest::Client,
    /// Why each question refused was refused, and whether by the person (an
    /// answer of no), by question id, until its refusal is said.
    why: Mutex<HashMap<String, (String, bool)>>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is never shown.
        f.debug_struct("Forwarder")
            .field("to", &self.shown())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// An answer as the approver gives it.
#[derive(Deserialize)]
struct Given {
    question_id: String,
    answer: String,
}

impl Forwarder {
    /// Forwards to `to`, taking no more than `timeout` for an answer. An
    /// endpoint must be https, or http on a loopback address: a question
    /// shows what the agent would run, and the token goes with it.
    pub fn new(to: Destination, timeout: Duration) -> Result<Self, String> {
        match &to {
            Destination::Program(argv) if argv.first().is_none_or(|p| p.trim().is_empty()) => {
                return Err("command is empty".into());
            }
            Destination::Http { url, .. } if !secure(url) => {
                return Err(format!(
                    "url {url} must be https, or http on a loopback address (127.0.0.1, ::1, localhost)"
                ));
            }
            Destination::Program(_) | Destination::Http { .. } => {}
        }
        // The token is never sent anywhere the user did not name: no
        // redirect is followed, and a loopback endpoint is reached directly,
        // not through the environment's proxy.
        let mut client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Destination::Http { url, .. } = &to
            && url.scheme() == "http"
        {
            client = client.no_proxy();
        }
        let client = client.build().map_err(|e| e.to_string())?;
        Ok(Self {
            to,
            timeout,
            client,
            why: Mutex::default(),
        })
    }

    /// The destination as said to a person (never the token).
    fn shown(&self) -> String {
        match &self.to {
            Destination::Program(argv) => argv.first().cloned().unwrap_or_default(),
            Destination::Http { url, .. } => origin(url),
        }
    }

    /// The answer to `request`, or why there is none (and whether that is
    /// the person's no).
    async fn answer(&self, request: &PermissionRequest) -> Result<Answer, (String, bool)> {
        let question = serde_json::json!({
            "question_id": request.question_id,
            "session": request.session.to_string(),
            "parent": request.parent.map(|p| p.to_string()),
            "agent": request.agent,
            "call_id": request.call_id,
            "tool": request.tool,
            "input": request.input,
            "summary": request.summary,
        });
        let sent = async {
            match &self.to {
                Destination::Program(argv) => run(argv, &question).await,
                Destination::Http { url, token } => {
                    post(&self.client, url, token.as_deref(), &question).await
                }
            }
        };
        let failed = |why: String| (why, false);
        let text = tokio::time::timeout(self.timeout, sent)
            .await
            .map_err(|_| {
                failed(format!(
                    "no answer within {}",
                    super::ask::written(self.timeout)
                ))
            })?
            .map_err(failed)?;
        match bound(&text, &request.question_id) {
            Ok(Answer::No) => Err(("it answered no".into(), true)),
            Ok(answer) => Ok(answer),
            Err(why) => Err(failed(why)),
        }
    }
}

/// The answer in `text`, if it answers question `id`.
fn bound(text: &str, id: &str) -> Result<Answer, String> {
    let given: Given = serde_json::from_str(text.trim())
        .map_err(|e| format!("its answer is not {{\"question_id\", \"answer\"}} JSON ({e})"))?;
    if given.question_id != id {
        return Err(format!(
            "its answer was for question {:?}, not {id}",
            given.question_id
        ));
    }
    Answer::from_word(&given.answer).ok_or_else(|| format!("{:?} is not an answer", given.answer))
}

/// Whether `url` may carry questions and a token: https, or http to this
/// machine.
fn secure(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => !host.is_empty(),
        "http" => loopback,
        _ => false,
    }
}

/// Runs `argv` with `question` as one line on its stdin; what it printed.
async fn run(argv: &[String], question: &serde_json::Value) -> Result<String, String> {
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let mut child = tokio::process::Command::new(program)
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    // Whatever it started goes with it, answered or given up on.
    let _group = Group(
        child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32)),
    );
    let mut line = question.to_string();
    line.push('\n');
    if let Some(mut stdin) = child.stdin.take() {
        // A program that answers without reading it is fine.
        let _ = stdin.write_all(line.as_bytes()).await;
    }
    // The answer is its first line; what it leaves running is killed once
    // it is read.
    let mut out = String::new();
    if let Some(stdout) = child.stdout.take() {
        let mut first = tokio::io::BufReader::new(stdout.take(ANSWER_BYTES));
        let _ = first.read_line(&mut out).await;
    }
    if !out.trim().is_empty() {
        return Ok(out);
    }
    let status = child.wait().await.map_err(|e| e.to_string())?;
    Err(match status.success() {
        true => format!("{program} answered nothing"),
        false => format!("{program} failed ({status})"),
    })
}

/// A program's process group, killed when dropped.
struct Group(Option<rustix::process::Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(group) = self.0 {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

/// Posts `question` to `url`; the answer's body.
async fn post(
    client: &reqwest::Client,
    url: &reqwest::Url,
    token: Option<&str>,
    question: &serde_json::Value,
) -> Result<String, String> {
    let mut post = client.post(url.clone()).json(question);
    if let Some(token) = token {
        post = post.bearer_auth(token);
    }
    // reqwest's errors name the URL, whose path may hold a secret.
    let mut response = post.send().await.map_err(|e| e.without_url().to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("it answered HTTP {status}"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = (response.chunk().await).map_err(|e| e.without_url().to_string())? {
        body.extend_from_slice(&chunk);
        if body.len() as u64 > ANSWER_BYTES {
            return Err("its answer is too long".into());
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

impl Approver for Forwarder {
    fn ask(&self, request: PermissionRequest) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            match self.answer(&request).await {
                Ok(answer) => answer,
                Err((why, persons)) => {
                    tracing::warn!(approver = %self.shown(), question = %request.question_id, %why, "refused");
                    let mut refused = self.why.lock().unwrap_or_else(|e| e.into_inner());
                    refused.insert(request.question_id, (why, persons));
                    Answer::No
                }
            }
        })
    }

    fn refused_by_a_person(&self, request: &PermissionRequest) -> bool {
        let refused = self.why.lock().unwrap_or_else(|e| e.into_inner());
        refused
            .get(&request.question_id)
            .is_none_or(|(_, persons)| *persons)
    }

    fn one_at_a_time(&self) -> bool {
        false
    }

    fn name(&self) -> &'static str {
        match self.to {
            Destination::Program(_) => "program",
            Destination::Http { .. } => "http",
        }
    }

    fn refusal(&self, request: &PermissionRequest, mode: PermissionMode) -> String {
        let why = (self.why.lock().unwrap_or_else(|e| e.into_inner()))
            .remove(&request.question_id)
            .map_or_else(|| "it answered no".into(), |(why, _)| why);
        let needed = mode_allowing(&request.tool);
        format!(
            "permission denied: {} was not approved by the approver of your configuration ({}): {why} (permission mode {mode}); run with --permission-mode {needed} to allow it",
            request.tool,
            self.shown()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Destination {
        Destination::Http {
            url: reqwest::Url::parse(text).unwrap(),
            token: None,
        }
    }

    #[test]
    fn only_https_or_loopback_http_may_carry_questions() {
        for ok in [
            "https://approvals.example.com/ask",
            "http://127.0.0.1:8080/ask",
            "http://[::1]:9/ask",
            "http://localhost/ask",
        ] {
            assert!(Forwarder::new(url(ok), DEFAULT_TIMEOUT).is_ok(), "{ok}");
        }
        for bad in [
            "http://approvals.example.com/ask",
            "http://10.0.0.1/ask",
            "ftp://127.0.0.1/ask",
        ] {
            let why = Forwarder::new(url(bad), DEFAULT_TIMEOUT).unwrap_err();
            assert!(why.contains("must be https"), "{bad}: {why}");
        }
        let empty = Forwarder::new(Destination::Program(vec![]), DEFAULT_TIMEOUT).unwrap_err();
        assert_eq!(empty, "command is empty");
    }

    #[tokio::test]
    async fn a_program_that_does_not_answer_in_time_is_a_no_and_leaves_nothing_running() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
        let argv = ["sh", "-c", &script].map(str::to_owned).to_vec();
        let forwarder =
            Forwarder::new(Destination::Program(argv), Duration::from_millis(200)).unwrap();
        let request = PermissionRequest {
            question_id: "q-1".into(),
            tool: "Bash".into(),
            ..PermissionRequest::default()
        };
        assert_eq!(forwarder.ask(request.clone()).await, Answer::No);
        assert!(
            !forwarder.refused_by_a_person(&request),
            "a failure to answer is nobody's no"
        );
        let why = forwarder.refusal(&request, PermissionMode::Default);
        assert!(why.contains("(sh): no answer within 200ms"), "{why}");
        // The refusal's reason is said once.
        let again = forwarder.refusal(&request, PermissionMode::Default);
        assert!(again.contains(": it answered no"), "{again}");
        // Killed: gone, or a zombie waiting to be reaped.
        ended(&pid_file).await;
    }

    #[tokio::test]
    async fn a_programs_first_line_answers_though_it_lingers_and_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "echo \"$$\" > {}; read -r q; echo '{{\"question_id\":\"q-7\",\"answer\":\"always\"}}'; exec sleep 600",
            pid_file.display()
        );
        let argv = ["sh", "-c", &script].map(str::to_owned).to_vec();
        // Far longer than the test: the answer comes from the first line.
        let forwarder =
            Forwarder::new(Destination::Program(argv), Duration::from_secs(600)).unwrap();
        let request = PermissionRequest {
            question_id: "q-7".into(),
            ..PermissionRequest::default()
        };
        assert_eq!(forwarder.ask(request).await, Answer::Always);
        ended(&pid_file).await;
    }

    /// Waits until the process whose id is in `pid_file` is gone or a
    /// zombie; panics if it is not within five seconds of being killed.
    async fn ended(pid_file: &std::path::Path) {
        let pid: i32 = std::fs::read_to_string(pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                !state.starts_with('Z')
            })
        };
        for _ in 0..500 {
            if !alive() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("process {pid} still runs");
    }

    #[test]
    fn the_token_and_the_endpoints_path_are_never_shown() {
        let to = Destination::Http {
            url: reqwest::Url::parse("https://hooks.example.com/T0/s3cret-path?k=v").unwrap(),
            token: Some("tok-123".into()),
        };
        let forwarder = Forwarder::new(to, DEFAULT_TIMEOUT).unwrap();
        let shown = format!("{forwarder:?}");
        assert!(
            !shown.contains("tok-123") && !shown.contains("s3cret"),
            "{shown}"
        );
        let request = PermissionRequest {
            tool: "Bash".into(),
            ..PermissionRequest::default()
        };
        let said = forwarder.refusal(&request, PermissionMode::Default);
        assert!(said.contains("(https://hooks.example.com)"), "{said}");
        assert!(!said.contains("s3cret"), "{said}");
    }

    #[test]
    fn an_answer_counts_only_for_the_question_it_names() {
        let yes = r#"{"question_id":"q-1","answer":"yes"}"#;
        assert_eq!(bound(yes, "q-1"), Ok(Answer::Yes));
        let always = r#"{"question_id":"q-1","answer":"Always"}"#;
        assert_eq!(bound(always, "q-1"), Ok(Answer::Always));
        let why = bound(yes, "q-2").unwrap_err();
        assert_eq!(why, "its answer was for question \"q-1\", not q-2");
        let no = r#"{"question_id":"q-1","answer":"no"}"#;
        assert_eq!(bound(no, "q-1"), Ok(Answer::No));
        assert!(bound("sure", "q-1").unwrap_err().contains("not {"));
        let odd = r#"{"question_id":"q-1","answer":"maybe"}"#;
        assert_eq!(bound(odd, "q-1").unwrap_err(), "\"maybe\" is not an answer");
    }
}
