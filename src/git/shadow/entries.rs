//! The entries of an index file, read as git's index format lays them out
//! (versions 2 to 4): each path's mode and object, none of the record of
//! sizes and times git keeps beside them. Pure: bytes in, entries out; any
//! malformed file is an error, never a panic.

/// One path of the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// From the top of the work tree, as git names it (any bytes).
    pub path: Vec<u8>,
    /// Its mode (`0o100644`, `0o100755`, `0o120000` for a link, `0o160000`
    /// for a submodule).
    pub mode: u32,
    /// Its object, in hexadecimal.
    pub oid: String,
}

/// Why an index file could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("index file not read: {0}")]
pub(super) struct BadIndex(&'static str);

/// The stat data before the mode, and the mode, uid, gid and size after it.
const STAT_BEFORE_MODE: usize = 24;
const STAT: usize = 40;
/// A flag of an entry's: its name is followed by a second word of flags.
const EXTENDED: u16 = 0x4000;
/// A second-word flag: added with `git add -N`, not yet in any tree.
const INTENT_TO_ADD: u16 = 0x2000;

/// The entries of `bytes` (an index file whose objects are `oid_len` bytes
/// long) whose path `keep` accepts, in the file's order. Of a path in
/// conflict, the entry of our side is kept; a path only intended to be added
/// has none.
pub(super) fn read(
    bytes: &[u8],
    oid_len: usize,
    mut keep: impl FnMut(&[u8]) -> bool,
) -> Result<Vec<Entry>, BadIndex> {
    let mut at = Reader { bytes, at: 0 };
    if at.take(4)? != b"DIRC" {
        return Err(BadIndex("not an index file"));
    }
    let version = at.word()?;
    if !(2..=4).contains(&version) {
        return Err(BadIndex("unknown version"));
    }
    let count = at.word()?;
    let mut entries = Vec::new();
    let mut path: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at.at;
        let stat = at.take(STAT)?;
        let mode = u32::from_be_bytes(
            stat[STAT_BEFORE_MODE..STAT_BEFORE_MODE + 4]
                .try_into()
                .map_err(|_| BadIndex("short entry"))?,
        );
        let oid = at.take(oid_len)?;
        let flags = at.half()?;
        let more = match flags & EXTENDED != 0 {
            true if version < 3 => return Err(BadIndex("extended flags before version 3")),
            true => at.half()?,
            false => 0,
        };
        if version == 4 {
            let strip = at.varint()?;
            let kept = path
                .len()
                .checked_sub(strip)
                .ok_or(BadIndex("path prefix longer than the last path"))?;
            path.truncate(kept);
            path.extend_from_slice(at.name()?);
        } else {
            path.clear();
            path.extend_from_slice(at.name()?);
            // The entry padded with NULs to a multiple of eight bytes.
            let length = at.at - start;
            at.take((8 - length % 8) % 8)?;
        }
        let stage = (flags >> 12) & 0b11;
        if matches!(stage, 1 | 3) || more & INTENT_TO_ADD != 0 || !keep(&path) {
            continue;
        }
        entries.push(Entry {
            path: path.clone(),
            mode,
            oid: hex(oid),
        });
    }
    // Extensions follow, then the checksum. Those whose name starts with a
    // capital letter are optional to understand; the others change what the
    // entries mean (a split index keeps the rest of them in another file, a
    // sparse one has folders for entries).
    while at.bytes.len().saturating_sub(at.at) > oid_len {
        let signature = at.take(4)?;
        match signature {
            b"link" => return Err(BadIndex("split index")),
            [b'A'..=b'Z', ..] => {}
            _ => return Err(BadIndex("an extension this reader does not know")),
        }
        let size = at.word()? as usize;
        at.take(size)?;
    }
    Ok(entries)
}

/// A cursor over the file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadIndex> {
        let end = self.at.checked_add(n).ok_or(BadIndex("truncated"))?;
        let taken = self.bytes.get(self.at..end).ok_or(BadIndex("truncated"))?;
        self.at = end;
        Ok(taken)
    }

    fn word(&mut self) -> Result<u32, BadIndex> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn half(&mut self) -> Result<u16, BadIndex> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    /// A NUL-ended name, the NUL read too.
    fn name(&mut self) -> Result<&'a [u8], BadIndex> {
        let rest = self.bytes.get(self.at..).unwrap_or_default();
        let end = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or(BadIndex("unended path"))?;
        self.at += end + 1;
        Ok(&rest[..end])
    }

    /// git's variable-length number: seven bits a byte, most significant
    /// first, each continued byte adding one.
    fn varint(&mut self) -> Result<usize, BadIndex> {
        let mut byte = self.take(1)?[0];
        let mut value = usize::from(byte & 0x7f);
        while byte & 0x80 != 0 {
            byte = self.take(1)?[0];
            value = value
                .checked_add(1)
                .and_then(|v| v.checked_mul(128))
                .ok_or(BadIndex("number too large"))?
                | usize::from(byte & 0x7f);
        }
        Ok(value)
    }
}

/// `bytes` in lower-case hexadecimal.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

#[cfg(test)]
mod tests;
