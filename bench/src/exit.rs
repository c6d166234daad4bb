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
    // clap's message, its tip and the possible values on one line; the
    // usage synopsis and the pointer to --help are replaced by ours below.
    let text = e.render().to_string();
    let mut parts = Vec::new();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    while let Some(l) = lines.next() {
        if l.starts_with("Usage:") {
            // The synopsis can run over several indented lines: skip it.
            lines
                .by_ref()
                .take_while(|l| !l.starts_with("For more"))
                .for_each(drop);
            continue;
        }
        if l.starts_with("For more information") {
            continue;
        }
        parts.push(l.strip_prefix("error: ").unwrap_or(l));
    }
    let first = if parts.is_empty() {
        "bad command line".to_string()
    } else {
        parts.join("; ")
    };
    // args_os: an argument that is not UTF-8 is a usage error, not a panic.
    let sub = std::env::args_os().nth(1);
    let help = match sub.as_ref().and_then(|s| s.to_str()) {
        Some(sub) if subcommands.iter().any(|s| s == sub) => format!("fabkit {sub} --help"),
        _ => "fabkit --help".into(),
    };
    eprintln!("fabkit: error: {first} (see `{help}`)");
    std::process::ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

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
