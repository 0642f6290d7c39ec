//! What a server's tools become for a model, and what a call's result becomes for
//! it: pure. A server is trusted to run, not to be well-behaved: its names are
//! made into names every provider accepts, its descriptions and schemas bounded,
//! and its results converted to text and cut.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;

/// The longest description a model is shown of one tool.
pub const MAX_DESCRIPTION_CHARS: usize = 4_000;

/// The largest input schema offered; a tool with a larger one is left out.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// The most characters of one result a model gets; the rest is cut, saying so.
pub const MAX_RESULT_CHARS: usize = 100_000;

/// The most tools one server offers; the rest are left out, saying so.
pub const MAX_TOOLS: usize = 256;

/// The longest tool name providers accept.
const MAX_NAME: usize = 64;

/// One tool of a server, as offered.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    /// The name the model calls it by: `mcp__<server>__<tool>`.
    pub full_name: String,
    /// Its name on its server.
    pub name: String,
    /// What it does, bounded.
    pub description: String,
    /// Its input schema.
    pub schema: Arc<Value>,
    /// The server says it changes nothing (`readOnlyHint: true`): it runs without
    /// asking and beside other calls.
    pub read_only: bool,
}

/// The name a model calls `tool` of `server` by: `mcp__server__tool`, with every
/// character providers refuse replaced by `_`, at most 64 characters.
pub fn full_name(server: &str, tool: &str) -> String {
    let name: String = format!("mcp__{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME)
        .collect();
    name
}

/// The tools a server listed, as offered, and why any were left out (one line
/// each): a name that collides with another once made acceptable, a schema over
/// [`MAX_SCHEMA_BYTES`].
pub fn offered(server: &str, listed: Vec<rmcp::model::Tool>) -> (Vec<ToolInfo>, Vec<String>) {
    let mut tools: Vec<ToolInfo> = Vec::new();
    let mut left_out = Vec::new();
    let listed_count = listed.len();
    for tool in listed {
        if tools.len() == MAX_TOOLS {
            left_out.push(format!(
                "MCP server {server:?}: only its first {MAX_TOOLS} tools are offered; {} more are left out",
                listed_count - MAX_TOOLS
            ));
            break;
        }
        let full = full_name(server, &tool.name);
        if tools.iter().any(|t| t.full_name == full) {
            left_out.push(format!(
                "MCP server {server:?}: tool {:?} is left out: its name is {full} as another tool's",
                tool.name
            ));
            continue;
        }
        let mut schema = Value::Object((*tool.input_schema).clone());
        if let Some(object) = schema.as_object_mut() {
            // A draft marker some providers' validators refuse; it says nothing.
            object.remove("$schema");
            object
                .entry("type")
                .or_insert_with(|| Value::String("object".into()));
        }
        let size = serde_json::to_string(&schema).map_or(usize::MAX, |s| s.len());
        if size > MAX_SCHEMA_BYTES {
            left_out.push(format!(
                "MCP server {server:?}: tool {:?} is left out: its input schema is {} KiB (at most {} KiB)",
                tool.name,
                size / 1024,
                MAX_SCHEMA_BYTES / 1024
            ));
            continue;
        }
        let description: String = tool
            .description
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(MAX_DESCRIPTION_CHARS)
            .collect();
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        tools.push(ToolInfo {
            full_name: full,
            name: tool.name.into_owned(),
            description,
            schema: Arc::new(schema),
            read_only,
        });
    }
    (tools, left_out)
}

/// A call's result as the model reads it, and whether the server said it failed
/// (`isError`). Text is kept; images, audio and binary resources are described;
/// a result with only structured content is that JSON. Cut at
/// [`MAX_RESULT_CHARS`].
pub fn result_text(result: &CallToolResult) -> (String, bool) {
    let mut parts: Vec<String> = result.content.iter().map(block_text).collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    (cut(text), result.is_error == Some(true))
}

fn block_text(block: &ContentBlock) -> String {
    let size = |data: &str| data.len() / 4 * 3;
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => {
            format!("[image: {}, {} bytes]", image.mime_type, size(&image.data))
        }
        ContentBlock::Audio(audio) => {
            format!("[audio: {}, {} bytes]", audio.mime_type, size(&audio.data))
        }
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource {uri}: {}, {} bytes]",
                mime_type.as_deref().unwrap_or("binary"),
                size(blob)
            ),
            #[allow(unreachable_patterns)]
            _ => "[resource]".to_owned(),
        },
        ContentBlock::ResourceLink(link) => {
            format!("[resource link: {} ({})]", link.uri, link.name)
        }
        #[allow(unreachable_patterns)]
        _ => "[content of a kind orchestrate does not show]".to_owned(),
    }
}

/// `text` cut at [`MAX_RESULT_CHARS`], saying how much was left out.
fn cut(text: String) -> String {
    match text.char_indices().nth(MAX_RESULT_CHARS) {
        None => text,
        Some((at, _)) => {
            let rest = text[at..].chars().count();
            format!("{}\n[output cut: {rest} more characters]", &text[..at])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(value: Value) -> rmcp::model::Tool {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn names_are_made_acceptable_and_collisions_left_out() {
        assert_eq!(full_name("files", "read_file"), "mcp__files__read_file");
        assert_eq!(full_name("x", "get.sum v2"), "mcp__x__get_sum_v2");
        assert_eq!(full_name("x", &"a".repeat(100)).len(), 64);
        let (tools, left_out) = offered(
            "x",
            vec![
                tool(serde_json::json!({"name": "a.b", "inputSchema": {"type": "object"}})),
                tool(serde_json::json!({"name": "a_b", "inputSchema": {"type": "object"}})),
            ],
        );
        assert_eq!(tools.len(), 1);
        assert_eq!(
            left_out,
            [
                "MCP server \"x\": tool \"a_b\" is left out: its name is mcp__x__a_b as another tool's"
            ]
        );
    }

    #[test]
    fn schemas_and_descriptions_are_bounded_and_read_only_comes_from_the_hint() {
        let huge: serde_json::Map<String, Value> = (0..5000)
            .map(|i| (format!("field_{i}"), serde_json::json!({"type": "string"})))
            .collect();
        let (tools, left_out) = offered(
            "s",
            vec![
                tool(serde_json::json!({
                    "name": "look",
                    "description": "d".repeat(10_000),
                    "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "properties": {}},
                    "annotations": {"readOnlyHint": true}
                })),
                tool(serde_json::json!({"name": "change", "inputSchema": {"type": "object"}})),
                tool(
                    serde_json::json!({"name": "big", "inputSchema": {"type": "object", "properties": huge}}),
                ),
            ],
        );
        assert_eq!(tools[0].description.len(), MAX_DESCRIPTION_CHARS);
        assert_eq!(
            *tools[0].schema,
            serde_json::json!({"type": "object", "properties": {}})
        );
        assert!(tools[0].read_only);
        assert!(!tools[1].read_only, "no hint: it may change things");
        assert_eq!(tools.len(), 2);
        assert!(
            left_out[0]
                .starts_with("MCP server \"s\": tool \"big\" is left out: its input schema is")
        );
        let many: Vec<rmcp::model::Tool> = (0..MAX_TOOLS + 3)
            .map(|i| tool(serde_json::json!({"name": format!("t{i}"), "inputSchema": {}})))
            .collect();
        let (tools, left_out) = offered("m", many);
        assert_eq!(tools.len(), MAX_TOOLS);
        assert_eq!(
            left_out,
            ["MCP server \"m\": only its first 256 tools are offered; 3 more are left out"]
        );
    }

    #[test]
    fn results_become_text_and_are_cut() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [
                {"type": "text", "text": "sum: 3"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "hello"}},
                {"type": "resource_link", "uri": "file:///b", "name": "b"}
            ],
            "isError": true
        }))
        .unwrap();
        assert_eq!(
            result_text(&result),
            (
                "sum: 3\n[image: image/png, 3 bytes]\n[resource file:///a.txt]\nhello\n[resource link: file:///b (b)]"
                    .to_owned(),
                true
            )
        );
        let structured: CallToolResult = serde_json::from_value(
            serde_json::json!({"content": [], "structuredContent": {"n": 1}}),
        )
        .unwrap();
        assert_eq!(result_text(&structured), ("{\"n\":1}".to_owned(), false));
        let long = "é".repeat(MAX_RESULT_CHARS + 5);
        assert_eq!(
            cut(long),
            format!(
                "{}\n[output cut: 5 more characters]",
                "é".repeat(MAX_RESULT_CHARS)
            )
        );
    }
}
