//! What one simple command runs: its own program, and every program it hands
//! its arguments to (`xargs`, `timeout`, `nice`, `env`, `sh -c`, `eval`,
//! `find -exec`, …), each as the words a rule is matched against. A shell
//! keyword before the command (`then rm`, `do rm`) is looked past; `find
//! -delete` counts as `rm`. `None` when what runs cannot be told from the
//! words: a `git` given `-c` options or a command of its own (an alias may run
//! anything), or commands nested past a depth.

/// How deep `sh -c 'eval "xargs …"'` and the like are followed.
const MAX_DEPTH: usize = 8;

/// A word of a command as the shell reads it: quotes and backslashes taken
/// out; not `literal` when an unquoted or double-quoted `$`, or a glob, stays
/// in it (the shell would replace it with words nobody can tell from here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Word {
    pub(super) text: String,
    pub(super) literal: bool,
}

/// One program a command runs: its name (without its folder) and arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Program(pub(super) Vec<Word>);

impl Program {
    /// The words as text, one space between them.
    pub(super) fn text(&self) -> String {
        let words: Vec<&str> = self.0.iter().map(|w| w.text.as_str()).collect();
        words.join(" ")
    }

    /// How many words, from the first, the shell runs as written.
    pub(super) fn literal_words(&self) -> usize {
        self.0.iter().take_while(|w| w.literal).count()
    }
}

/// Words that open or close a shell construct before a command.
const KEYWORDS: [&str; 11] = [
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "time",
];

/// Constructs whose words are not a command to run (`for f in a b`).
const NOT_COMMANDS: [&str; 4] = ["for", "select", "case", "function"];

/// The programs `part` (one simple command, as `commands` cuts a line) runs.
pub(super) fn programs(part: &str) -> Option<Vec<Program>> {
    let mut found = Vec::new();
    run(&words(part), 0, &mut found)?;
    Some(found)
}

/// The programs of a whole line (`sh -c LINE`, `eval …`), `depth` levels in.
fn line(text: &str, depth: usize, found: &mut Vec<Program>) -> Option<()> {
    for part in super::commands(text)? {
        run(&words(&part), depth, found)?;
    }
    Some(())
}

/// Adds the programs that `words` (one command) runs to `found`.
fn run(words: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    let start = words
        .iter()
        .position(|w| !(w.literal && KEYWORDS.contains(&w.text.as_str())))
        .unwrap_or(words.len());
    let words = &words[start..];
    let Some(first) = words.first() else {
        return Some(());
    };
    if first.literal && NOT_COMMANDS.contains(&first.text.as_str()) {
        return Some(());
    }
    let name = first.text.rsplit('/').next().unwrap_or_default().to_owned();
    let mut program = vec![Word {
        text: name.clone(),
        literal: first.literal,
    }];
    program.extend(words[1..].iter().cloned());
    found.push(Program(program));
    if !first.literal {
        return Some(());
    }
    let args = &words[1..];
    let inner = |skip: usize| args.get(skip..).unwrap_or_default();
    let deeper = depth + 1;
    match name.as_str() {
        "command" | "builtin" | "nohup" | "setsid" => run(inner(options(args, &[])), deeper, found),
        "exec" => run(inner(options(args, &["-a"])), deeper, found),
        "sudo" | "doas" => run(
            inner(options(
                args,
                &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U"],
            )),
            deeper,
            found,
        ),
        "nice" => run(inner(options(args, &["-n"])), deeper, found),
        "ionice" => run(inner(options(args, &["-c", "-n", "-p"])), deeper, found),
        "stdbuf" => run(inner(options(args, &["-i", "-o", "-e"])), deeper, found),
        "chroot" => run(inner(options(args, &[]) + 1), deeper, found),
        "timeout" => run(inner(options(args, &["-s", "-k"]) + 1), deeper, found),
        "env" => env(args, deeper, found),
        "xargs" => {
            let at = options(args, &["-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s"]);
            match args.get(at) {
                Some(_) => run(inner(at), deeper, found),
                None => Some(()),
            }
        }
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "busybox" => {
            shell(args, deeper, found)
        }
        "eval" | "watch" => {
            let skip = if name == "watch" {
                options(args, &["-n", "-d", "-q"])
            } else {
                0
            };
            joined(inner(skip), deeper, found)
        }
        "find" => find(args, deeper, found),
        "git" => git(args, deeper, found),
        _ => Some(()),
    }
}

/// Where the command after a wrapper's options starts in `args`: options are
/// skipped (and, for those in `with_value` given apart, their values), up to
/// `--` or the first word that is not one.
fn options(args: &[Word], with_value: &[&str]) -> usize {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        if text == "--" {
            return i + 1;
        }
        if !text.starts_with('-') || text == "-" {
            return i;
        }
        i += if with_value.contains(&text) { 2 } else { 1 };
    }
    i
}

/// `env [OPTIONS] [NAME=VALUE…] COMMAND`; `-S STRING` is a command line.
fn env(args: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        if text == "-S" || text == "--split-string" {
            return joined(args.get(i + 1..).unwrap_or_default(), depth, found);
        }
        if let Some(split) = text.strip_prefix("--split-string=") {
            return line(split, depth, found);
        }
        if matches!(text, "-u" | "-C" | "--unset" | "--chdir") {
            i += 2;
        } else if text.starts_with('-') || is_assignment(text) {
            i += 1;
        } else {
            break;
        }
    }
    run(args.get(i..).unwrap_or_default(), depth, found)
}

/// `sh -c LINE …`: its line's programs; a shell without `-c` runs a script no
/// rule can read, and counts as itself.
fn shell(args: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    let mut i = 0;
    let mut command = false;
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        if !text.starts_with('-') || text == "-" || text == "--" {
            break;
        }
        if !text.starts_with("--") && text.contains('c') {
            command = true;
        }
        // `-o OPTION` and `-O OPTION` take a value.
        i += if matches!(text, "-o" | "-O" | "+o" | "+O") {
            2
        } else {
            1
        };
    }
    if !command {
        return Some(());
    }
    match args.get(i) {
        Some(text) if text.literal => line(&text.text, depth, found),
        Some(_) => None,
        None => Some(()),
    }
}

/// Words joined into one command line, as `eval` and `watch` run them.
fn joined(words: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    if words.iter().any(|w| !w.literal) {
        return None;
    }
    let text: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
    line(&text.join(" "), depth, found)
}

/// `find`'s actions: each `-exec`, `-execdir`, `-ok`, `-okdir` command (up to
/// its `;` or `+`), and `-delete`, which is `rm`.
fn find(args: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        i += 1;
        match word.text.as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end = args[i..]
                    .iter()
                    .position(|w| w.text == ";" || w.text == "+")
                    .map_or(args.len(), |n| i + n);
                run(&args[i..end], depth, found)?;
                i = end + 1;
            }
            "-delete" => found.push(Program(vec![Word {
                text: "rm".into(),
                literal: true,
            }])),
            _ => {}
        }
    }
    Some(())
}

/// The commands of git's own that cannot be an alias (git ignores an alias of
/// a command it has) and run no program a rule would not see.
const GIT_COMMANDS: [&str; 46] = [
    "add",
    "am",
    "apply",
    "archive",
    "bisect",
    "blame",
    "branch",
    "bundle",
    "cat-file",
    "checkout",
    "cherry-pick",
    "clean",
    "clone",
    "commit",
    "config",
    "describe",
    "diff",
    "fetch",
    "format-patch",
    "gc",
    "grep",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "merge",
    "mv",
    "notes",
    "pull",
    "push",
    "rebase",
    "reflog",
    "remote",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "stash",
    "status",
    "submodule",
    "switch",
    "tag",
];

/// `git`: what it runs besides itself. A `-c` option (config that may name a
/// program), a command git does not have (an alias), `submodule foreach`,
/// `bisect run` and `rebase --exec` (their commands), or a command name the
/// shell expands, make it unreadable or add their commands.
fn git(args: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        if text == "-c" || text.starts_with("--config-env") || text.starts_with("-c") {
            return None;
        }
        if !text.starts_with('-') {
            break;
        }
        i += if matches!(text, "-C" | "--git-dir" | "--work-tree" | "--namespace") {
            2
        } else {
            1
        };
    }
    let Some(command) = args.get(i) else {
        return Some(());
    };
    if !command.literal || !GIT_COMMANDS.contains(&command.text.as_str()) {
        return None;
    }
    let rest = args.get(i + 1..).unwrap_or_default();
    match command.text.as_str() {
        "submodule" if rest.first().is_some_and(|w| w.text == "foreach") => {
            let at = 1 + options(&rest[1..], &[]);
            joined(rest.get(at..).unwrap_or_default(), depth, found)
        }
        "bisect" if rest.first().is_some_and(|w| w.text == "run") => {
            run(rest.get(1..).unwrap_or_default(), depth, found)
        }
        "rebase" => {
            for (at, word) in rest.iter().enumerate() {
                if word.text == "-x" || word.text == "--exec" {
                    joined(rest.get(at + 1..at + 2).unwrap_or_default(), depth, found)?;
                } else if let Some(exec) = word.text.strip_prefix("--exec=") {
                    line(exec, depth, found)?;
                }
            }
            Some(())
        }
        _ => Some(()),
    }
}

/// `NAME=VALUE`.
fn is_assignment(text: &str) -> bool {
    text.split_once('=')
        .is_some_and(|(name, _)| super::valid_name(name) && !name.starts_with('-'))
}

/// The words of one simple command (its quotes closed: `commands` checked).
pub(super) fn words(part: &str) -> Vec<Word> {
    /// One word as it is read.
    #[derive(Default)]
    struct Reading {
        text: String,
        started: bool,
        /// An unquoted or double-quoted `$` or backtick.
        expands: bool,
        /// An unquoted `*`, `?`, or `[` then `]`: a glob.
        star: bool,
        bracket: bool,
    }
    let mut words = Vec::new();
    let mut word = Reading::default();
    let mut chars = part.chars();
    let mut finish = |word: &mut Reading| {
        let done = std::mem::take(word);
        if done.started {
            words.push(Word {
                text: done.text,
                literal: !done.expands && !done.star,
            });
        }
    };
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            finish(&mut word);
            continue;
        }
        word.started = true;
        match c {
            '\'' => word.text.extend(chars.by_ref().take_while(|q| *q != '\'')),
            '"' => {
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.text.extend(chars.next()),
                        '$' | '`' => {
                            word.expands = true;
                            word.text.push(q);
                        }
                        q => word.text.push(q),
                    }
                }
            }
            '\\' => word.text.extend(chars.next()),
            '$' | '`' => {
                word.expands = true;
                word.text.push(c);
            }
            '*' | '?' => {
                word.star = true;
                word.text.push(c);
            }
            '[' => {
                word.bracket = true;
                word.text.push(c);
            }
            ']' => {
                // `[…]` with something in it; a lone `[` is the test command.
                word.star |= word.bracket && !word.text.ends_with('[');
                word.text.push(c);
            }
            c => word.text.push(c),
        }
    }
    finish(&mut word);
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(part: &str) -> Option<Vec<String>> {
        programs(part).map(|found| found.iter().map(Program::text).collect())
    }

    #[test]
    fn wrappers_are_looked_into_and_find_delete_is_rm() {
        let cases: [(&str, &[&str]); 12] = [
            ("rm -rf x", &["rm -rf x"]),
            ("then rm x", &["rm x"]),
            ("do /bin/rm x", &["rm x"]),
            ("xargs -n 1 rm", &["xargs -n 1 rm", "rm"]),
            (
                "timeout -s KILL 5 rm x",
                &["timeout -s KILL 5 rm x", "rm x"],
            ),
            (
                "nice -n 5 nohup rm x",
                &["nice -n 5 nohup rm x", "nohup rm x", "rm x"],
            ),
            ("env -i A=b rm x", &["env -i A=b rm x", "rm x"]),
            (
                "bash -c 'cd x && rm y'",
                &["bash -c cd x && rm y", "cd x", "rm y"],
            ),
            ("eval rm x", &["eval rm x", "rm x"]),
            (
                "find . -name '*.o' -exec rm {} ;",
                &["find . -name *.o -exec rm {} ;", "rm {}"],
            ),
            ("find . -delete", &["find . -delete", "rm"]),
            ("stdbuf -oL rm x", &["stdbuf -oL rm x", "rm x"]),
        ];
        for (part, expected) in cases {
            assert_eq!(texts(part).unwrap(), expected, "{part}");
        }
    }

    #[test]
    fn a_name_the_shell_expands_is_not_literal_and_git_that_may_run_anything_is_unreadable() {
        let found = programs("$@ x").unwrap();
        assert_eq!(found[0].literal_words(), 0);
        let found = programs("/bin/r? x").unwrap();
        assert_eq!(found[0].literal_words(), 0);
        let found = programs("[ -f x ]").unwrap();
        assert_eq!(found[0].literal_words(), 4, "a lone [ is the test command");
        let found = programs("rm '*.o' \"$f\"").unwrap();
        assert_eq!(found[0].literal_words(), 2, "a quoted glob is literal");
        let found = programs("rm x[ab]").unwrap();
        assert_eq!(found[0].literal_words(), 1);
        for part in [
            "git -c core.pager=rm log",
            "git frobnicate",
            "git $CMD",
            "bash -c \"$X\"",
            "eval \"$X\"",
        ] {
            assert_eq!(texts(part), None, "{part}");
        }
        assert_eq!(texts("git -C sub status").unwrap(), ["git -C sub status"]);
        assert_eq!(
            texts("git submodule foreach 'rm -rf x'").unwrap(),
            ["git submodule foreach rm -rf x", "rm -rf x"]
        );
        assert_eq!(texts("for f in a b").unwrap(), Vec::<String>::new());
    }
}
