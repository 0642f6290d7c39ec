//! The `Read` tool: a text file with numbered lines, a window at a time.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::files;
use crate::error::ToolError;
use crate::tools::{Concurrency, Tool, ToolContext};

/// Lines shown per call, at most.
const MAX_LINES: usize = 2000;
/// Bytes of output per call, at most.
const MAX_BYTES: usize = 256 * 1024;
/// Characters of one line shown, at most.
const MAX_LINE_CHARS: usize = 2000;

/// Input of `Read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadInput {
    /// The file to read: absolute, or relative to the workspace root.
    pub file_path: String,
    /// The line to start at, from 1 (default 1).
    #[serde(default)]
    pub offset: Option<usize>,
    /// How many lines to show (default and maximum 2000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Reads a text file.
#[derive(Debug)]
pub struct Read;

impl Tool for Read {
    fn name(&self) -> &str {
        "Read"
    }

    fn description(&self) -> &str {
        "Reads a text file from the workspace and returns it with line numbers (`   N\\tline`). \
         Shows at most 2000 lines or 256 KiB per call; longer files end with a note giving the \
         `offset` to read on from. Lines longer than 2000 characters are cut. Binary files are \
         refused. Read a file before you Write over it or Edit it: changes to files this \
         session has not read (or that changed since) are refused."
    }

    fn input_schema(&self) -> Value {
        super::schema::<ReadInput>()
    }

    fn read_only(&self) -> bool {
        true
    }

    fn concurrency(&self, _input: &Value) -> Concurrency {
        Concurrency::Safe
    }

    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let input: ReadInput = super::parse(input)?;
            // A file beside one of the person's skills is read beneath its
            // folder; any other beneath the workspace.
            let (path, beneath) = match ctx.in_read_root(&input.file_path) {
                Some(found) => found,
                None => (ctx.resolve(&input.file_path)?, ctx.beneath()),
            };
            let shown = ctx.display(&path);
            let session = ctx.session;
            let files_state = ctx.files.clone();
            tokio::task::spawn_blocking(move || {
                let place = (&beneath, path.as_path());
                let (window, stamp) = read(place, &shown, input.offset.unwrap_or(1), input.limit)?;
                files_state.record_seen(session, &path, stamp);
                Ok(window)
            })
            .await
            .map_err(|e| ToolError::Failed(format!("the read was interrupted: {e}")))?
        })
    }
}

/// Reads the window; returns it with the file's stamp from before the read. The
/// file is opened beneath the workspace (`beneath`).
fn read(
    (beneath, path): (&super::beneath::Beneath, &std::path::Path),
    shown: &str,
    offset: usize,
    limit: Option<usize>,
) -> Result<(String, files::Stamp), ToolError> {
    use std::io::BufRead;
    if path.is_dir() {
        return Err(ToolError::Failed(format!(
            "{shown} is a directory: use Ls to list it"
        )));
    }
    let not_regular = || ToolError::Failed(format!("{shown} is not a regular file"));
    // Opened without waiting: a FIFO would wait for a writer forever.
    let file = beneath.read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::Failed(format!("{shown} does not exist")),
        _ => ToolError::Failed(format!("{shown}: {e}")),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let stamp = files::Stamp::of(&meta);
    // The file is streamed: a huge log costs time to count its lines, not memory.
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, file);
    let head = reader
        .fill_buf()
        .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
    if files::is_binary(head) {
        return Err(ToolError::Failed(format!(
            "{shown} is a binary file ({} bytes); Read shows text files only",
            meta.len()
        )));
    }
    if head.is_empty() {
        return Ok((format!("{shown} is empty."), stamp));
    }
    let first = offset.max(1);
    let limit = limit.unwrap_or(MAX_LINES).clamp(1, MAX_LINES);
    let mut out = String::new();
    let mut last = first - 1;
    let mut full = false;
    let mut total = 0;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = read_line_cut(&mut reader, &mut raw)
            .map_err(|e| ToolError::Failed(format!("{shown}: {e}")))?;
        if n == 0 {
            break;
        }
        total += 1;
        if total < first || full || total >= first + limit {
            continue;
        }
        let text = String::from_utf8_lossy(&raw);
        let mut line = text.strip_suffix('\n').unwrap_or(&text);
        line = line.strip_suffix('\r').unwrap_or(line);
        if total == 1 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        let shown_line = match line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => format!(
                "{}… [line cut at {MAX_LINE_CHARS} characters]",
                &line[..cut]
            ),
            None => line.to_owned(),
        };
        let entry = format!("{total:>6}\t{shown_line}\n");
        if out.len() + entry.len() > MAX_BYTES && last >= first {
            full = true;
            continue;
        }
        out.push_str(&entry);
        last = total;
    }
    if first > total {
        return Err(ToolError::InvalidInput(format!(
            "offset {first} is past the end of {shown}, which has {total} lines"
        )));
    }
    if last < total {
        out.push_str(&format!(
            "\n[Showing lines {first}-{last} of {total}. To read on, call Read with offset={}.]\n",
            last + 1
        ));
    }
    Ok((out, stamp))
}

/// Reads one line (through its `\n`) and returns its length, keeping only its first
/// bytes in `line`: enough for [`MAX_LINE_CHARS`] characters and one more, so that
/// a cut line is seen as cut. A file that is one line of gigabytes costs the time to
/// scan it, not the memory to hold it.
fn read_line_cut(reader: &mut impl std::io::BufRead, line: &mut Vec<u8>) -> std::io::Result<usize> {
    const KEPT: usize = MAX_LINE_CHARS * 4 + 4;
    let mut length = 0;
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffer.is_empty() {
            return Ok(length);
        }
        let (taken, ended) = match memchr::memchr(b'\n', buffer) {
            Some(end) => (end + 1, true),
            None => (buffer.len(), false),
        };
        let room = KEPT.saturating_sub(line.len());
        line.extend_from_slice(&buffer[..taken.min(room)]);
        reader.consume(taken);
        length += taken;
        if ended {
            return Ok(length);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_context;

    #[tokio::test]
    async fn lines_come_numbered_and_windowed() {
        let (_dir, ctx) = test_context();
        std::fs::write(ctx.workspace.join("a.txt"), "one\r\ntwo\nthree\n").unwrap();
        let out = Read
            .call(serde_json::json!({"file_path": "a.txt"}), &ctx)
            .await
            .unwrap();
        assert_eq!(out, "     1\tone\n     2\ttwo\n     3\tthree\n");
        let out = Read
            .call(
                serde_json::json!({"file_path": "a.txt", "offset": 2, "limit": 1}),
                &ctx,
            )
            .await
            .unwrap();
        assert_eq!(
            out,
            "     2\ttwo\n\n[Showing lines 2-2 of 3. To read on, call Read with offset=3.]\n"
        );
    }

    #[tokio::test]
    async fn the_caps_hold_and_say_how_to_read_on() {
        let (_dir, ctx) = test_context();
        let many: String = (1..=2500).map(|i| format!("line {i}\n")).collect();
        std::fs::write(ctx.workspace.join("many.txt"), many).unwrap();
        let out = Read
            .call(serde_json::json!({"file_path": "many.txt"}), &ctx)
            .await
            .unwrap();
        assert!(out.contains("  2000\tline 2000\n"));
        assert!(!out.contains("line 2001\n"));
        assert!(out.ends_with(
            "[Showing lines 1-2000 of 2500. To read on, call Read with offset=2001.]\n"
        ));

        let wide = format!("{}\n", "x".repeat(5000));
        std::fs::write(ctx.workspace.join("wide.txt"), wide.repeat(100)).unwrap();
        let out = Read
            .call(serde_json::json!({"file_path": "wide.txt"}), &ctx)
            .await
            .unwrap();
        assert!(out.contains("… [line cut at 2000 characters]"));
        assert!(out.len() <= MAX_BYTES + 200, "{}", out.len());

        let huge = format!("{}\n", "y".repeat(1900)).repeat(1000);
        std::fs::write(ctx.workspace.join("huge.txt"), huge).unwrap();
        let out = Read
            .call(serde_json::json!({"file_path": "huge.txt"}), &ctx)
            .await
            .unwrap();
        assert!(out.len() <= MAX_BYTES + 200, "{}", out.len());
        assert!(out.contains("To read on, call Read with offset="));
    }

    #[tokio::test]
    async fn a_file_of_one_50_mb_line_is_cut_without_being_held() {
        use std::io::Write;
        let (_dir, ctx) = test_context();
        let path = ctx.workspace.join("bundle.min.js");
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..50 {
            file.write_all(&chunk).unwrap();
        }
        file.into_inner().unwrap().sync_all().unwrap();
        let out = Read
            .call(serde_json::json!({"file_path": "bundle.min.js"}), &ctx)
            .await
            .unwrap();
        assert_eq!(
            out,
            format!(
                "     1\t{}… [line cut at 2000 characters]\n",
                "a".repeat(MAX_LINE_CHARS)
            )
        );
    }

    #[test]
    fn a_line_is_scanned_to_its_end_but_only_its_head_is_kept() {
        use std::io::Read as _;
        let endless = std::io::repeat(b'x').take(256 << 20);
        let mut reader = std::io::BufReader::new(endless.chain(&b"\nnext\n"[..]));
        let mut line = Vec::new();
        assert_eq!(
            read_line_cut(&mut reader, &mut line).unwrap(),
            (256 << 20) + 1
        );
        assert_eq!(line.len(), MAX_LINE_CHARS * 4 + 4);
        assert!(line.capacity() < 64 * 1024, "{}", line.capacity());
        line.clear();
        assert_eq!(read_line_cut(&mut reader, &mut line).unwrap(), 5);
        assert_eq!(line, b"next\n");
        line.clear();
        assert_eq!(read_line_cut(&mut reader, &mut line).unwrap(), 0);
    }

    #[tokio::test]
    async fn a_fifo_is_refused_at_once() {
        let (_dir, ctx) = test_context();
        crate::small_file::fifo(&ctx.workspace.join("pipe"));
        let err = Read
            .call(serde_json::json!({"file_path": "pipe"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "pipe is not a regular file");
    }

    #[tokio::test]
    async fn binary_files_directories_and_missing_files_are_refused_clearly() {
        let (_dir, ctx) = test_context();
        std::fs::write(
            ctx.workspace.join("img.png"),
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        )
        .unwrap();
        let err = Read
            .call(serde_json::json!({"file_path": "img.png"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "img.png is a binary file (16 bytes); Read shows text files only"
        );
        std::fs::create_dir(ctx.workspace.join("src")).unwrap();
        let err = Read
            .call(serde_json::json!({"file_path": "src"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "src is a directory: use Ls to list it");
        let err = Read
            .call(serde_json::json!({"file_path": "nope.txt"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "nope.txt does not exist");
        let err = Read
            .call(serde_json::json!({"file_path": "../../etc/passwd"}), &ctx)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("outside the workspace"));
    }
}
