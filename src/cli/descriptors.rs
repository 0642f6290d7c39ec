//! The process's limit on open descriptors. A fan-out holds a socket and a journal
//! per live sub-agent, and the usual soft limit (1 024) stops it near five hundred
//! with "Too many open files", while the hard limit allows far more: the soft limit
//! is raised at start, to the hard limit but at most 65 536. The commands and
//! servers the run starts inherit it (Go's runtime puts the original back in its
//! children; that takes code between fork and exec, which this crate does not
//! write), hence the modest ceiling: a program that closes every possible
//! descriptor at start loops 65 536 times, not a million.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The most the soft limit is raised to: room for ten thousand sub-agents' sockets
/// and journals several times over.
pub const CEILING: u64 = 1 << 16;

/// The limit to set instead of `limit`, when its soft limit is below what its hard
/// limit allows.
fn raised(limit: &Rlimit) -> Option<Rlimit> {
    let target = limit.maximum.unwrap_or(CEILING).min(CEILING);
    let current = limit.current.unwrap_or(u64::MAX);
    (current < target).then_some(Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    })
}

/// Raises the soft limit on open descriptors to the hard limit; returns the limit
/// it was and the one it is now, when it changed.
pub fn raise_open_files_limit() -> Option<(u64, u64)> {
    let limit = getrlimit(Resource::Nofile);
    let new = raised(&limit)?;
    setrlimit(Resource::Nofile, new).ok()?;
    Some((limit.current.unwrap_or(0), new.current.unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(current: Option<u64>, maximum: Option<u64>) -> Rlimit {
        Rlimit { current, maximum }
    }

    #[test]
    fn the_soft_limit_rises_to_the_hard_one_and_never_past_the_ceiling() {
        let up = raised(&limit(Some(1024), Some(20_000))).unwrap();
        assert_eq!((up.current, up.maximum), (Some(20_000), Some(20_000)));
        let capped = raised(&limit(Some(1024), Some(524_288))).unwrap();
        assert_eq!(
            (capped.current, capped.maximum),
            (Some(CEILING), Some(524_288))
        );
        let capped = raised(&limit(Some(1024), None)).unwrap();
        assert_eq!(capped.current, Some(CEILING));
        assert!(raised(&limit(Some(20_000), Some(20_000))).is_none());
        assert!(raised(&limit(None, None)).is_none());
        let capped = raised(&limit(Some(1024), Some(u64::MAX - 1))).unwrap();
        assert_eq!(capped.current, Some(CEILING));
    }
}
