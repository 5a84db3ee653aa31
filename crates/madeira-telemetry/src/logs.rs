//! Changing the log filter while running (`PUT /admin/log-level`). The binary owns
//! the `tracing-subscriber` reload handle; this wraps it so the server can use it
//! without knowing the subscriber's type.

use std::sync::{Arc, Mutex};

type Apply = dyn Fn(&str) -> Result<(), String> + Send + Sync;

/// A handle on the process's log filter (`EnvFilter` syntax: `info`,
/// `madeira_engine=debug,warn`, ...).
#[derive(Clone)]
pub struct LogControl {
    apply: Arc<Apply>,
    current: Arc<Mutex<String>>,
}

impl std::fmt::Debug for LogControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogControl").field("current", &self.current()).finish_non_exhaustive()
    }
}

impl LogControl {
    /// `apply` parses and installs a filter, or says why it cannot.
    pub fn new(
        initial: impl Into<String>,
        apply: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self { apply: Arc::new(apply), current: Arc::new(Mutex::new(initial.into())) }
    }

    /// Installs `filter`; on error the previous filter stays.
    pub fn set(&self, filter: &str) -> Result<(), String> {
        let filter = filter.trim();
        if filter.is_empty() {
            return Err("empty filter: give a level (error, warn, info, debug, trace) or directives".into());
        }
        (self.apply)(filter)?;
        *self.lock() = filter.to_string();
        tracing::warn!(filter = %filter, "log filter changed");
        Ok(())
    }

    pub fn current(&self) -> String {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, String> {
        match self.current.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_filter_keeps_the_old_one() {
        let control = LogControl::new("info", |f| if f == "bogus" { Err("bad".into()) } else { Ok(()) });
        control.set("debug").expect("set");
        assert_eq!(control.current(), "debug");
        assert!(control.set("bogus").is_err());
        assert!(control.set("  ").is_err());
        assert_eq!(control.current(), "debug");
    }
}
