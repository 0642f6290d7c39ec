//! The options of programs that run other programs, read as the programs
//! themselves read them: short flags, clustered or not; short options whose
//! value is attached or the next word; long options with `=VALUE` or the next
//! word. An option a program's table does not know makes the command
//! unreadable: what it does to the words after it cannot be told.

use super::Word;

/// The options one program takes before its operands.
pub(super) struct Spec {
    /// Short flags without a value.
    pub(super) flags: &'static str,
    /// Short options with a value, attached (`-n5`) or the next word.
    pub(super) valued: &'static str,
    /// Short options whose value, if any, can only be attached (`xargs -i{}`).
    pub(super) optional: &'static str,
    /// Long flags without a value.
    pub(super) long_flags: &'static [&'static str],
    /// Long options with a value, after `=` or the next word.
    pub(super) long_valued: &'static [&'static str],
    /// Long options whose value, if any, comes after `=`.
    pub(super) long_optional: &'static [&'static str],
    /// `-NUMBER` is an option (`nice -5`).
    pub(super) numbers: bool,
    /// `+x` and `+o NAME` are options too (a shell's).
    pub(super) plus: bool,
}

/// What a program's options came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Parsed {
    /// Where its operands start.
    pub(super) at: usize,
    /// The short flags given.
    pub(super) flags: String,
    /// The options given a value: by short letter or long name.
    pub(super) values: Vec<(String, String)>,
}

impl Parsed {
    /// The value of the option named `short` or `long`, if given.
    pub(super) fn value(&self, short: &str, long: &str) -> Option<&str> {
        (self.values.iter())
            .find(|(name, _)| name == short || name == long)
            .map(|(_, value)| value.as_str())
    }
}

/// Reads the options at the start of `args` as `spec` says; `None` at an
/// option it does not know, or at an option or value the shell would expand.
pub(super) fn parse(args: &[Word], spec: &Spec) -> Option<Parsed> {
    let mut parsed = Parsed::default();
    let mut i = 0;
    let value_after = |i: &mut usize| -> Option<String> {
        *i += 1;
        let word = args.get(*i)?;
        word.literal.then(|| word.text.clone())
    };
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        if text == "--" {
            parsed.at = i + 1;
            return Some(parsed);
        }
        let plus = spec.plus && text.starts_with('+') && text.len() > 1;
        if !(text.starts_with('-') || plus) || text == "-" {
            break;
        }
        if !word.literal {
            return None;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (long, None),
            };
            let value = if spec.long_flags.contains(&name) && value.is_none() {
                None
            } else if spec.long_valued.contains(&name) {
                Some(match value {
                    Some(value) => value,
                    None => value_after(&mut i)?,
                })
            } else if spec.long_optional.contains(&name) {
                value
            } else {
                return None;
            };
            if let Some(value) = value {
                parsed.values.push((name.to_owned(), value));
            }
            i += 1;
            continue;
        }
        let short = &text[1..];
        if spec.numbers && short.bytes().all(|b| b.is_ascii_digit()) {
            i += 1;
            continue;
        }
        for (at, c) in short.char_indices() {
            let rest = &short[at + c.len_utf8()..];
            if spec.flags.contains(c) {
                parsed.flags.push(c);
            } else if spec.valued.contains(c) {
                let value = match rest {
                    "" => value_after(&mut i)?,
                    rest => rest.to_owned(),
                };
                parsed.values.push((c.to_string(), value));
                break;
            } else if spec.optional.contains(c) {
                parsed.values.push((c.to_string(), rest.to_owned()));
                break;
            } else {
                return None;
            }
        }
        i += 1;
    }
    parsed.at = i;
    Some(parsed)
}

#[cfg(test)]
mod tests {
    use super::super::words;
    use super::*;

    const SPEC: Spec = Spec {
        flags: "vx",
        valued: "nS",
        optional: "i",
        long_flags: &["verbose"],
        long_valued: &["signal", "split-string"],
        long_optional: &["replace"],
        numbers: true,
        plus: false,
    };

    fn at(line: &str) -> Option<usize> {
        parse(&words(line), &SPEC).map(|p| p.at)
    }

    #[test]
    fn options_are_read_as_the_program_reads_them() {
        assert_eq!(at("-v -n 5 rm x"), Some(3));
        assert_eq!(at("-vn5 rm"), Some(1));
        assert_eq!(at("--signal KILL rm"), Some(2));
        assert_eq!(at("--signal=KILL rm"), Some(1));
        assert_eq!(
            at("--replace rm"),
            Some(1),
            "an optional value is attached only"
        );
        assert_eq!(at("-i{} rm"), Some(1));
        assert_eq!(at("-5 rm"), Some(1));
        assert_eq!(at("-v -- -rm"), Some(2));
        let parsed = parse(&words("-vS'rm x' y"), &SPEC).unwrap();
        assert_eq!(parsed.value("S", "split-string"), Some("rm x"));
        assert_eq!(parsed.flags, "v");
    }

    #[test]
    fn an_option_not_known_or_expanded_is_unreadable() {
        for line in [
            "--max-args 1 rm",
            "-q rm",
            "-vq rm",
            "--verbose=1 rm",
            "-n",
            "-n $N rm",
            "-$X rm",
        ] {
            assert_eq!(at(line), None, "{line}");
        }
    }
}
