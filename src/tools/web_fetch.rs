//! The `WebFetch` tool (Claude Code's name and input): GETs a URL and gives the
//! model its content, HTML converted to markdown (`htmd`), size-capped. It has an
//! effect outside the workspace (a request to a server), so it is gated like a
//! command: asked about, or allowed per domain by a `WebFetch(domain:…)` rule. A
//! redirect to another host, scheme or port is reported, not followed (`http`
//! upgraded to `https` is followed); link-local addresses are never reached
//! (`guard`).

mod guard;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use self::guard::{GuardedResolver, link_local, same_site};
use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

/// Bytes of a response read at most.
const MAX_BYTES: usize = 5 * 1024 * 1024;
/// Characters of content given to the model at most.
const MAX_CHARS: usize = 100_000;
/// Redirects within one site followed at most.
const MAX_REDIRECTS: usize = 5;
/// How long one fetch may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Input of `WebFetch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WebFetchInput {
    /// The URL to fetch (http or https).
    url: String,
    /// What to look for in the page.
    prompt: String,
}

/// Fetches a web page.
#[derive(Debug)]
pub struct WebFetch;

impl Tool for WebFetch {
    fn name(&self) -> &str {
        "WebFetch"
    }

    fn description(&self) -> &str {
        "Fetches a URL (http or https) and returns its content, HTML converted to markdown, \
         at most 100 000 characters, with `prompt` (what you are looking for) repeated after \
         it. A redirect to another host, scheme or port is reported rather than followed: fetch that URL if \
         you want it. Use it to read documentation or an issue a task points to."
    }

    fn input_schema(&self) -> Value {
        super::schema::<WebFetchInput>()
    }

    fn read_only(&self) -> bool {
        false
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn call<'a>(
        &'a self,
        input: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: WebFetchInput = super::parse(input)?;
            let url = reqwest::Url::parse(&input.url).map_err(|e| {
                ToolError::InvalidInput(format!("{:?} is not a URL: {e}", input.url))
            })?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(ToolError::InvalidInput(format!(
                    "only http and https URLs can be fetched, not {}",
                    url.scheme()
                )));
            }
            if link_local(&url) {
                return Err(ToolError::InvalidInput(format!(
                    "{url} is a link-local or cloud metadata address (instance credentials are served there); it is not fetched"
                )));
            }
            let (url, content_type, bytes, cut) = match fetch(url).await? {
                Fetched::Page {
                    url,
                    content_type,
                    bytes,
                    cut,
                } => (url, content_type, bytes, cut),
                Fetched::Elsewhere { from, to } => {
                    return Ok(format!(
                        "{from} redirects to another site: {to}\nFetch that URL if you want to follow it."
                    ));
                }
            };
            let text = String::from_utf8_lossy(&bytes);
            if bytes.contains(&0) {
                return Err(ToolError::Failed(format!(
                    "{url} is not text ({content_type}): WebFetch reads pages and text"
                )));
            }
            let html = content_type.contains("html")
                || (content_type.is_empty() && text.trim_start().starts_with('<'));
            let body = if html {
                let page = text.into_owned();
                super::blocking(move || Ok(markdown(&page))).await?
            } else {
                text.into_owned()
            };
            let (body, shortened) = cap(&body);
            let mut out = format!(
                "Content of {url}{}:\n\n{body}",
                if html {
                    " (HTML converted to markdown)"
                } else {
                    ""
                }
            );
            if cut || shortened {
                out.push_str("\n\n[… the rest of the page was cut: it is too long]");
            }
            out.push_str(&format!("\n\n[What to look for in it: {}]", input.prompt));
            Ok(out)
        })
    }
}

/// What a fetch found.
enum Fetched {
    /// The page: its final URL, content type, bytes, and whether they were cut.
    Page {
        url: reqwest::Url,
        content_type: String,
        bytes: Vec<u8>,
        cut: bool,
    },
    /// A redirect to another host, scheme or port.
    Elsewhere { from: reqwest::Url, to: String },
}

/// The process's one WebFetch client (its connections pooled across calls),
/// resolving names through the guard.
fn client() -> Result<&'static reqwest::Client, ToolError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(TIMEOUT)
                .user_agent(concat!("orchestrate/", env!("CARGO_PKG_VERSION")))
                .dns_resolver(Arc::new(GuardedResolver))
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| ToolError::Failed(format!("cannot make an HTTP client: {e}")))
}

async fn fetch(mut url: reqwest::Url) -> Result<Fetched, ToolError> {
    let client = client()?;
    for _ in 0..=MAX_REDIRECTS {
        let response = client.get(url.clone()).send().await.map_err(|e| {
            ToolError::Failed(format!(
                "cannot fetch {url}: {}",
                crate::llm::http::root_cause(&e)
            ))
        })?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| {
                    ToolError::Failed(format!("{url}: HTTP {status} with no Location"))
                })?;
            let next = url
                .join(location)
                .map_err(|e| ToolError::Failed(format!("{url}: bad redirect {location:?}: {e}")))?;
            if !same_site(&url, &next) {
                return Ok(Fetched::Elsewhere {
                    from: url,
                    to: next.to_string(),
                });
            }
            url = next;
            continue;
        }
        if !status.is_success() {
            return Err(ToolError::Failed(format!("{url}: HTTP {status}")));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut bytes = Vec::new();
        let mut cut = false;
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ToolError::Failed(format!("{url}: {}", crate::llm::http::root_cause(&e)))
            })?;
            let room = MAX_BYTES - bytes.len();
            if chunk.len() > room {
                bytes.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        return Ok(Fetched::Page {
            url,
            content_type,
            bytes,
            cut,
        });
    }
    Err(ToolError::Failed(format!(
        "{url}: more than {MAX_REDIRECTS} redirects"
    )))
}

/// The deepest nesting of elements converted to markdown; a page nested deeper
/// is shown as its text alone (the converter walks the tree recursively, and a
/// page of thousands of nested `<div>`s would overflow a thread's stack).
const MAX_NESTING: usize = 512;

/// The stack of the thread that converts a page: room for [`MAX_NESTING`]
/// levels of the converter's recursion, many times over.
const CONVERTER_STACK: usize = 64 * 1024 * 1024;

/// HTML as markdown, scripts and styles left out; a page nested past
/// [`MAX_NESTING`] (or one the converter fails on) as its text without tags.
/// The conversion runs on a thread of its own, with a stack to spare.
fn markdown(html: &str) -> String {
    if nesting(html) > MAX_NESTING {
        return without_tags(html);
    }
    let page = html.to_owned();
    let converted = std::thread::Builder::new()
        .name("html-to-markdown".into())
        .stack_size(CONVERTER_STACK)
        .spawn(move || {
            let converter = htmd::HtmlToMarkdown::builder()
                .skip_tags(vec!["script", "style", "noscript", "head"])
                .build();
            converter.convert(&page).ok()
        })
        .ok()
        .and_then(|thread| thread.join().ok().flatten());
    converted.unwrap_or_else(|| without_tags(html))
}

/// Elements that never hold others, so never nest.
const VOID: [&str; 16] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "!doctype", "?xml",
];

/// How deep `html`'s elements nest, at most, counting opening and closing tags
/// as written (comments skipped, void and self-closed elements not counted).
fn nesting(html: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        if let Some(comment) = rest.strip_prefix("!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
            continue;
        }
        let end = rest.find('>').unwrap_or(rest.len());
        let tag = &rest[..end];
        rest = &rest[end..];
        if let Some(closing) = tag.strip_prefix('/') {
            if closing.starts_with(|c: char| c.is_ascii_alphabetic()) {
                depth = depth.saturating_sub(1);
            }
            continue;
        }
        let name: String = tag
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '/')
            .collect::<String>()
            .to_ascii_lowercase();
        let opens = name.starts_with(|c: char| c.is_ascii_alphabetic())
            && !VOID.contains(&name.as_str())
            && !tag.ends_with('/');
        if opens {
            depth += 1;
            deepest = deepest.max(depth);
        }
    }
    deepest
}

/// `html`'s text: every tag taken out, blank lines squeezed.
fn without_tags(html: &str) -> String {
    let mut text = String::with_capacity(html.len() / 2);
    let mut in_tag = false;
    for c in html.chars() {
        match (in_tag, c) {
            (false, '<') => in_tag = true,
            (true, '>') => {
                in_tag = false;
                text.push(' ');
            }
            (false, c) => text.push(c),
            (true, _) => {}
        }
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    lines.join("\n")
}

/// `text` cut to [`MAX_CHARS`] on a character boundary; true when it was cut.
fn cap(text: &str) -> (&str, bool) {
    if text.len() <= MAX_CHARS {
        return (text, false);
    }
    let mut end = MAX_CHARS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_page_nested_past_the_limit_is_shown_as_text_and_crashes_nothing() {
        let deep = format!(
            "<html><body>{}deep text{}</body></html>",
            "<div>".repeat(5000),
            "</div>".repeat(5000)
        );
        assert!(super::nesting(&deep) > super::MAX_NESTING);
        assert_eq!(super::markdown(&deep), "deep text");
        // Just under the limit it converts, on a thread with room for it.
        let nested = format!("{}<p>kept</p>{}", "<div>".repeat(500), "</div>".repeat(500));
        assert_eq!(super::markdown(&nested), "kept");
        let plain = "<!-- <div><div> --><p>a<br>b<img src=x/></p><hr/>";
        assert_eq!(super::nesting(plain), 1);
    }

    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::tools::test_context;

    /// A server on loopback that answers each request by its path.
    async fn serve(answer: fn(&str) -> String) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = vec![0; 4096];
                let n = socket.read(&mut request).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&request[..n]).into_owned();
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let _ = socket.write_all(answer(&path).as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (base, task)
    }

    fn page(status: &str, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn answer(path: &str) -> String {
        match path {
            "/doc" => page(
                "200 OK",
                "content-type: text/html; charset=utf-8\r\n",
                "<html><head><title>T</title><script>evil()</script></head><body><h1>Install</h1><p>Run <code>cargo add x</code>.</p><ul><li>one</li></ul></body></html>",
            ),
            "/moved" => page("301 Moved", "location: /doc\r\n", ""),
            "/away" => page("302 Found", "location: http://example.invalid/x\r\n", ""),
            "/port" => page("302 Found", "location: http://127.0.0.1:1/x\r\n", ""),
            "/gone" => page("404 Not Found", "", "no"),
            _ => page("200 OK", "content-type: text/plain\r\n", "plain words"),
        }
    }

    #[tokio::test]
    async fn html_becomes_markdown_and_redirects_stay_on_their_host() {
        let (base, server) = serve(answer).await;
        let (_dir, ctx) = test_context();
        let fetch = |path: &str| {
            WebFetch.call(
                json!({"url": format!("{base}{path}"), "prompt": "how to install"}),
                &ctx,
            )
        };
        let doc = fetch("/moved").await.unwrap();
        assert!(
            doc.starts_with(&format!(
                "Content of {base}/doc (HTML converted to markdown):"
            )),
            "{doc}"
        );
        assert!(
            doc.contains("# Install") && doc.contains("`cargo add x`") && doc.contains("one"),
            "{doc}"
        );
        assert!(!doc.contains("evil"), "{doc}");
        assert!(
            doc.ends_with("[What to look for in it: how to install]"),
            "{doc}"
        );
        let away = fetch("/away").await.unwrap();
        assert!(
            away.contains("redirects to another site: http://example.invalid/x"),
            "{away}"
        );
        let port = fetch("/port").await.unwrap();
        assert!(
            port.contains("redirects to another site: http://127.0.0.1:1/x"),
            "{port}"
        );
        let plain = fetch("/text").await.unwrap();
        assert!(plain.contains("plain words"), "{plain}");
        // A name goes through the guarding resolver, which keeps loopback.
        let named = base.replace("127.0.0.1", "localhost");
        let by_name = WebFetch
            .call(json!({"url": format!("{named}/text"), "prompt": "x"}), &ctx)
            .await
            .unwrap();
        assert!(by_name.contains("plain words"), "{by_name}");
        let gone = fetch("/gone").await.unwrap_err().to_string();
        assert!(gone.contains("HTTP 404"), "{gone}");
        let bad = WebFetch
            .call(json!({"url": "file:///etc/passwd", "prompt": "x"}), &ctx)
            .await;
        assert!(bad.unwrap_err().to_string().contains("only http and https"));
        for metadata in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/x",
            "http://[::ffff:169.254.169.254]/latest/meta-data/",
            "http://metadata.google.internal./computeMetadata/v1/",
        ] {
            let refused = WebFetch
                .call(json!({"url": metadata, "prompt": "x"}), &ctx)
                .await;
            assert!(
                refused.unwrap_err().to_string().contains("link-local"),
                "{metadata}"
            );
        }
        server.abort();
    }

    #[test]
    fn long_content_is_cut_on_a_character() {
        let text = "é".repeat(MAX_CHARS);
        let (cut, shortened) = cap(&text);
        assert!(shortened && cut.len() <= MAX_CHARS && cut.chars().all(|c| c == 'é'));
    }
}
