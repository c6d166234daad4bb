//! Notices: what a layer has to say that is no error of the call at hand
//! (a stale segment it removed, a resource it could not close and so
//! leaked, a variable it ignored). fabkit's tools print them on standard
//! error, the default; a library that embeds fabkit (the C API) takes them
//! instead with [`set_sink`], so nothing is printed on its caller's behalf.

use std::fmt::Display;
use std::sync::RwLock;

/// Where notices go: one process-wide function of the text.
pub type Sink = fn(&str);

fn print(text: &str) {
    eprintln!("fabkit: {text}");
}

static SINK: RwLock<Sink> = RwLock::new(print);

/// Says `text` where notices go (standard error unless [`set_sink`] chose).
pub fn notice(text: impl Display) {
    let sink = *SINK.read().unwrap_or_else(|p| p.into_inner());
    sink(&text.to_string());
}

/// Sends every later notice of this process to `sink`.
pub fn set_sink(sink: Sink) {
    *SINK.write().unwrap_or_else(|p| p.into_inner()) = sink;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

    #[test]
    fn a_sink_set_takes_every_later_notice() {
        // Other notices of this test binary may come too: look for ours.
        super::set_sink(|t| SEEN.lock().unwrap().push(t.to_string()));
        super::notice(format_args!("closed {} of {} (sink test)", 1, 2));
        let seen = SEEN.lock().unwrap();
        assert!(
            seen.iter().any(|t| t == "closed 1 of 2 (sink test)"),
            "{seen:?}"
        );
    }
}
