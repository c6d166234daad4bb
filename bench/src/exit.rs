//! How `fabkit` ends: a usage error (exit status 2) as opposed to a run
//! that failed (exit status 1), an error's causes on one line, and clap's
//! own errors put on that line.

/// A mistake in the command line (exit status 2), as opposed to a run that
/// failed (exit status 1).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A usage error with `msg`.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
}

/// Refuses with a usage error unless `cond`.
macro_rules! ensure_usage {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::exit::usage(format!($($fmt)+)));
        }
    };
}
pub(crate) use ensure_usage;

/// The exit status for an error: 2 when the command line asked for
/// something impossible (a usage error, a provider or capability that
/// cannot be had), 1 when a run failed. Library errors that may come from
/// a user's input (a domain, a table's sizes) are made [`Usage`] where the
/// tool validates that input, not classified here by their variant.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    use fabkit_fabric::Error as F;
    let refused =
        |f: Option<&F>| matches!(f, Some(F::UnknownProvider { .. } | F::Unsupported { .. }));
    // The DHT boxes its transport's error, out of the chain: look inside.
    let in_dht = |c: &(dyn std::error::Error + 'static)| {
        c.downcast_ref::<fabkit_dht::Error>()
            .is_some_and(|d| refused(d.transport_error()))
    };
    let usage = e
        .chain()
        .any(|c| c.is::<Usage>() || refused(c.downcast_ref()) || in_dht(c));
    if usage {
        2
    } else {
        1
    }
}

/// An error with its causes on one line: `context: cause: cause`.
pub fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

/// Reports a command-line error as clap found it, on one line (help and
/// version go out as clap prints them), and gives the exit status.
/// `subcommands` are the names whose help the line may point to.
pub fn clap_exit(e: clap::Error, subcommands: &[String]) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return std::process::ExitCode::from(if e.use_stderr() { 2 } else { 0 });
    }
    let first = clap_line(&e);
    // args_os: an argument that is not UTF-8 is a usage error, not a panic.
    let sub = std::env::args_os().nth(1);
    let help = match sub.as_ref().and_then(|s| s.to_str()) {
        Some(sub) if subcommands.iter().any(|s| s == sub) => format!("fabkit {sub} --help"),
        _ => "fabkit --help".into(),
    };
    eprintln!("fabkit: error: {first} (see `{help}`)");
    std::process::ExitCode::from(2)
}

/// clap's error on one line, built from what the error holds: its kind
/// and context (the argument and value it found, the values it takes,
/// what it suggests) or the message of the parser that refused a value,
/// worded as clap words them, the parts joined by `; `. clap's usage
/// synopsis and pointer to `--help` are left out: the caller adds its own.
pub fn clap_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind as K, ContextValue as V, ErrorKind as E};
    let text = |k: K| e.get(k).map(ToString::to_string);
    let (arg, value) = (text(K::InvalidArg), text(K::InvalidValue));
    let number = |k: K| match e.get(k) {
        Some(V::Number(n)) => Some(*n),
        _ => None,
    };
    let provided = |n: isize| {
        if n > 1 {
            "were provided"
        } else {
            "was provided"
        }
    };
    let found = match e.kind() {
        // A message of our own (a parser's that refuses with advice).
        _ if e.get(K::Custom).is_some() => text(K::Custom),
        E::InvalidValue => match (&arg, &value) {
            (Some(a), Some(v)) if v.is_empty() => {
                Some(format!("a value is required for '{a}' but none was supplied"))
            }
            (Some(a), Some(v)) => Some(format!("invalid value '{v}' for '{a}'")),
            _ => None,
        },
        E::ValueValidation => match (&arg, &value) {
            (Some(a), Some(v)) => Some(match std::error::Error::source(e) {
                Some(why) => format!("invalid value '{v}' for '{a}': {why}"),
                None => format!("invalid value '{v}' for '{a}'"),
            }),
            _ => None,
        },
        E::UnknownArgument => arg.map(|a| format!("unexpected argument '{a}' found")),
        E::InvalidSubcommand => {
            text(K::InvalidSubcommand).map(|s| format!("unrecognized subcommand '{s}'"))
        }
        E::MissingRequiredArgument => {
            arg.map(|a| format!("the following required arguments were not provided: {a}"))
        }
        E::MissingSubcommand => text(K::InvalidSubcommand)
            .map(|s| format!("'{s}' requires a subcommand but one was not provided")),
        E::ArgumentConflict => arg.map(|a| match e.get(K::PriorArg) {
            Some(V::String(p)) if *p == a => format!("the argument '{a}' cannot be used multiple times"),
            Some(V::String(p)) => format!("the argument '{a}' cannot be used with '{p}'"),
            Some(V::Strings(p)) => format!("the argument '{a}' cannot be used with: {}", p.join(", ")),
            _ => format!(
                "the argument '{a}' cannot be used with one or more of the other specified arguments"
            ),
        }),
        E::NoEquals => {
            arg.map(|a| format!("equal sign is needed when assigning values to '{a}'"))
        }
        E::TooManyValues => match (&arg, &value) {
            (Some(a), Some(v)) => Some(format!(
                "unexpected value '{v}' for '{a}' found; no more were expected"
            )),
            _ => None,
        },
        E::TooFewValues => match (&arg, number(K::ActualNumValues), number(K::MinValues)) {
            (Some(a), Some(n), Some(min)) => Some(format!(
                "{min} values required by '{a}'; only {n} {}",
                provided(n)
            )),
            _ => None,
        },
        E::WrongNumberOfValues => {
            match (&arg, number(K::ActualNumValues), number(K::ExpectedNumValues)) {
                (Some(a), Some(n), Some(want)) => Some(format!(
                    "{want} values required for '{a}' but {n} {}",
                    provided(n)
                )),
                _ => None,
            }
        }
        _ => None,
    };
    // Without context: what the kind says, or the cause clap was given.
    let mut parts = vec![found
        .or_else(|| e.kind().as_str().map(str::to_string))
        .or_else(|| std::error::Error::source(e).map(ToString::to_string))
        .unwrap_or_else(|| "bad command line".into())];
    let list = |name: &str, k: K| match e.get(k) {
        Some(V::Strings(v)) if !v.is_empty() => {
            // Quoted where clap quotes them: empty, or with white space.
            let quoted: Vec<String> = v
                .iter()
                .map(|x| {
                    if x.is_empty() || x.contains(char::is_whitespace) {
                        format!("{x:?}")
                    } else {
                        x.clone()
                    }
                })
                .collect();
            Some(format!("[{name}: {}]", quoted.join(", ")))
        }
        _ => None,
    };
    parts.extend(list("possible values", K::ValidValue));
    if e.kind() == E::MissingSubcommand {
        parts.extend(list("subcommands", K::ValidSubcommand));
    }
    for (what, k) in [
        ("subcommand", K::SuggestedSubcommand),
        ("argument", K::SuggestedArg),
        ("value", K::SuggestedValue),
    ] {
        match e.get(k) {
            Some(V::String(s)) => parts.push(format!("tip: a similar {what} exists: '{s}'")),
            Some(V::Strings(v)) if v.len() == 1 => {
                parts.push(format!("tip: a similar {what} exists: '{}'", v[0]));
            }
            Some(V::Strings(v)) if !v.is_empty() => {
                let all: Vec<String> = v.iter().map(|s| format!("'{s}'")).collect();
                parts.push(format!(
                    "tip: some similar {what}s exist: {}",
                    all.join(", ")
                ));
            }
            _ => {}
        }
    }
    if let Some(V::StyledStrs(tips)) = e.get(K::Suggested) {
        parts.extend(tips.iter().map(|t| format!("tip: {t}")));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clap_error_is_put_on_one_line_from_its_kind_and_context() {
        use clap::{Arg, ArgAction, Command};
        let cmd = || {
            Command::new("t")
                .arg(
                    Arg::new("op")
                        .long("op")
                        .value_parser(["write", "read", "send"]),
                )
                .arg(Arg::new("n").short('n').value_parser(|s: &str| {
                    s.parse::<u32>()
                        .map_err(|_| format!("`{s}` is not a whole number"))
                }))
                .arg(
                    Arg::new("all")
                        .long("all")
                        .action(ArgAction::SetTrue)
                        .conflicts_with("n"),
                )
                .arg(Arg::new("need").long("need").required(true))
        };
        let line = |args: &[&str]| {
            let all = ["t"].iter().chain(args);
            clap_line(&cmd().try_get_matches_from(all).unwrap_err())
        };
        assert_eq!(
            line(&["--need", "x", "--op", "sned"]),
            "invalid value 'sned' for '--op <op>'; [possible values: write, read, send]; tip: \
             a similar value exists: 'send'"
        );
        assert_eq!(
            line(&["--need", "x", "-n", "two"]),
            "invalid value 'two' for '-n <n>': `two` is not a whole number"
        );
        assert_eq!(
            line(&["--need", "x", "-n", "1", "--all"]),
            "the argument '-n <n>' cannot be used with '--all'"
        );
        assert_eq!(
            line(&[]),
            "the following required arguments were not provided: --need <need>"
        );
        assert_eq!(
            line(&["--need", "x", "--nede"]),
            "unexpected argument '--nede' found; tip: a similar argument exists: '--need'"
        );
        // A parser's own advice is the line.
        let mut e = clap::Error::new(clap::error::ErrorKind::InvalidValue);
        e.insert(
            clap::error::ContextKind::Custom,
            clap::error::ContextValue::String("use perf -o send".into()),
        );
        assert_eq!(clap_line(&e), "use perf -o send");
    }

    #[test]
    fn a_provider_that_cannot_is_a_usage_error_also_under_the_dht() {
        let unsupported = || fabkit_fabric::Error::Unsupported {
            provider: "udp".into(),
            what: "RMA".into(),
            hint: "pick another".into(),
        };
        let plain = anyhow::Error::from(unsupported());
        assert_eq!(exit_code(&plain), 2);
        let boxed = fabkit_dht::Error::Transport(Box::new(unsupported()));
        let under_dht = anyhow::Error::from(boxed).context("fabkit lockfree write");
        assert_eq!(exit_code(&under_dht), 2);
        let failed = anyhow::Error::from(fabkit_dht::Error::Internal("x".into()));
        assert_eq!(exit_code(&failed), 1);
    }
}
