//! What `/proc` tells of other processes: a process's parent.

/// The parent of process `pid`, from `/proc/<pid>/stat`; `None` when the process
/// is gone or its file cannot be read.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parent_in(&stat)
}

/// The parent's id in a `/proc/<pid>/stat` line: after the command's name in
/// parentheses (which may itself hold any character, parentheses and spaces
/// included), the state, then the parent's id.
fn parent_in(stat: &str) -> Option<i32> {
    let (_, after) = stat.rsplit_once(')')?;
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis() {
        assert_eq!(parent_in("42 (bash) S 7 42 42 0"), Some(7));
        assert_eq!(parent_in("42 (a) b) S 9 1"), Some(9));
        assert_eq!(parent_in("garbage"), None);
        assert_eq!(
            parent_of(std::process::id() as i32),
            Some(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()))
        );
    }
}
