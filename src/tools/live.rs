//! A running call's output as it comes, for the person: the bytes since the
//! last `tool_output` event of the call, the first at once and later ones at
//! most every [`EVERY`], each at most [`MAX_EVENT_BYTES`] (what came past that
//! before the next event is left out, and the event says so). Pure: Bash's
//! reader and an MCP server's progress notifications feed it, and publish
//! what it gives. What the model gets at the end is the call's result, not
//! this.

use tokio::time::{Duration, Instant};

/// How often a call's output goes out, at most.
pub(crate) const EVERY: Duration = Duration::from_millis(100);

/// The most bytes one event carries.
pub(crate) const MAX_EVENT_BYTES: usize = 16 * 1024;

/// One event's worth of output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// The bytes since the previous event, as text (invalid UTF-8 replaced).
    pub(crate) text: String,
    /// Bytes past [`MAX_EVENT_BYTES`] were left out.
    pub(crate) truncated: bool,
}

/// The output of one call waiting to go out.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pending: Vec<u8>,
    truncated: bool,
    /// When the last event went out.
    sent: Option<Instant>,
}

impl Live {
    /// Takes `bytes` read at `now`: the event to send now, when one is due
    /// (the call's first output, or [`EVERY`] after the last event).
    pub(crate) fn push(&mut self, bytes: &[u8], now: Instant) -> Option<Chunk> {
        let room = MAX_EVENT_BYTES.saturating_sub(self.pending.len());
        self.truncated |= bytes.len() > room;
        self.pending
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
        match self.sent {
            Some(at) if now < at + EVERY => None,
            _ => self.flush(now),
        }
    }

    /// When what waits is due to go out; `None` when nothing waits (the
    /// start of a cut character alone waits for its rest, not for a time).
    pub(crate) fn due(&self) -> Option<Instant> {
        let waiting = self.pending.len() > incomplete_tail(&self.pending) || self.truncated;
        waiting.then(|| self.sent.map_or_else(Instant::now, |at| at + EVERY))
    }

    /// What waits, as an event sent at `now`; `None` when nothing does. The
    /// start of a character cut by the read waits for its rest, unless the
    /// bytes after it were left out.
    pub(crate) fn flush(&mut self, now: Instant) -> Option<Chunk> {
        self.take(now, false)
    }

    /// The rest, once the command has ended: nothing more comes to complete
    /// a cut character.
    pub(crate) fn finish(&mut self, now: Instant) -> Option<Chunk> {
        self.take(now, true)
    }

    /// What waits, a cut character's start too when `whole`.
    fn take(&mut self, now: Instant, whole: bool) -> Option<Chunk> {
        let mut bytes = std::mem::take(&mut self.pending);
        if !whole && !self.truncated {
            let cut = incomplete_tail(&bytes);
            self.pending = bytes.split_off(bytes.len() - cut);
        }
        if bytes.is_empty() && !self.truncated {
            return None;
        }
        self.sent = Some(now);
        Some(Chunk {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            truncated: std::mem::take(&mut self.truncated),
        })
    }
}

/// How many bytes at the end of `bytes` begin a UTF-8 character whose rest
/// has not come yet.
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            // A continuation byte: its lead is further back.
            continue;
        }
        let wanted = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if wanted > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_output_goes_at_once_and_later_ones_at_most_every_tenth_of_a_second() {
        let start = Instant::now();
        let mut live = Live::default();
        assert_eq!(live.due(), None);
        let first = live.push(b"one\n", start).unwrap();
        assert_eq!((first.text.as_str(), first.truncated), ("one\n", false));
        assert_eq!(live.push(b"two\n", start + Duration::from_millis(10)), None);
        assert_eq!(
            live.push(b"three\n", start + Duration::from_millis(50)),
            None
        );
        assert_eq!(live.due(), Some(start + EVERY));
        let next = live.flush(start + EVERY).unwrap();
        assert_eq!(next.text, "two\nthree\n", "every byte since the last event");
        assert_eq!(live.due(), None);
        let later = live
            .push(b"four\n", start + Duration::from_millis(250))
            .unwrap();
        assert_eq!(later.text, "four\n");
        assert_eq!(live.finish(start + Duration::from_millis(260)), None);
    }

    #[test]
    fn an_event_is_capped_and_says_so_and_a_cut_character_waits_for_its_rest() {
        let start = Instant::now();
        let mut live = Live::default();
        live.push(b"x", start);
        let big = vec![b'a'; MAX_EVENT_BYTES + 10];
        assert_eq!(live.push(&big, start + Duration::from_millis(1)), None);
        let capped = live.flush(start + EVERY).unwrap();
        assert_eq!(capped.text.len(), MAX_EVENT_BYTES);
        assert!(capped.truncated);
        // "é" is two bytes, cut between two reads: its start alone is not due.
        let e = "é".as_bytes();
        assert_eq!(live.push(&e[..1], start + EVERY * 3).map(|c| c.text), None);
        assert_eq!(live.due(), None);
        let whole = live.push(&e[1..], start + EVERY * 4).unwrap();
        assert_eq!((whole.text.as_str(), whole.truncated), ("é", false));
        // A cut character at the very end is shown as it is.
        live.push(&e[..1], start + EVERY * 4 + Duration::from_millis(1));
        assert_eq!(live.finish(start + EVERY * 5).unwrap().text, "\u{FFFD}");
    }

    #[test]
    fn incomplete_tails_are_found() {
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail("é".as_bytes()), 0);
        assert_eq!(incomplete_tail(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_tail(&"€".as_bytes()[..2]), 2);
        assert_eq!(incomplete_tail(&"😀".as_bytes()[..3]), 3);
        assert_eq!(incomplete_tail(&[0xFF]), 0);
    }
}
