//! The sandbox every plugin call runs in: per-store state, the memory cap and the
//! classification of a failed call into a typed [`PluginError`].
//!
//! A plugin gets no ambient authority: the only imports linked are the `log` function
//! and (contract 0.3.0) reading the request it is asked about; there is no WASI, memory growth beyond the cap is refused (and remembered, so the
//! resulting trap is reported as a memory failure rather than a generic trap), and the
//! epoch deadline interrupts a call that runs too long.

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Trap};

use crate::error::PluginError;

/// Longest log line a plugin may emit; longer lines are truncated.
const MAX_LOG_LINE: usize = 1024;
/// Most log lines one plugin call may emit; later lines are dropped (and counted).
const MAX_LOG_LINES: usize = 64;

/// Data of one wasmtime `Store`, which holds exactly one plugin instance (fresh or
/// warm, see [`crate::instance`]): its memory cap, which plugin it is (for log tags)
/// and how far its linear memory has grown.
pub struct HostState {
    cap_bytes: usize,
    memory_denied: bool,
    /// Name and digest of the plugin currently executing, for log lines.
    current: Option<(String, String)>,
    log_lines: usize,
    dropped_log_lines: usize,
    /// Bytes of linear memory (all memories of the instance) granted so far.
    memory_bytes: usize,
    /// Host resources handed to the plugin (contract 0.3.0's `request`, one entry
    /// during an `evaluate` call).
    requests: ResourceTable,
}

impl HostState {
    /// A fresh state with a memory cap (bytes per linear memory).
    pub fn new(cap_bytes: usize) -> Self {
        HostState {
            cap_bytes,
            memory_denied: false,
            current: None,
            log_lines: 0,
            dropped_log_lines: 0,
            memory_bytes: 0,
            requests: ResourceTable::new(),
        }
    }

    /// The resources handed to the plugin.
    pub(crate) fn requests(&self) -> &ResourceTable {
        &self.requests
    }

    /// The resources handed to the plugin, to add or remove one.
    pub(crate) fn requests_mut(&mut self) -> &mut ResourceTable {
        &mut self.requests
    }

    /// Start one call: the log budget is per call.
    pub(crate) fn begin_call(&mut self) {
        self.memory_denied = false;
        self.log_lines = 0;
        self.dropped_log_lines = 0;
    }

    /// Bytes of linear memory the instance in this store has been granted so far.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

    /// Prepare for a call of one plugin: tag its log lines and apply its memory cap.
    pub(crate) fn enter(&mut self, name: &str, digest: &str, cap_bytes: usize) {
        self.current = Some((name.to_string(), digest.to_string()));
        self.cap_bytes = cap_bytes;
        self.memory_denied = false;
    }

    /// Record a log line from the plugin, bounded in count and length.
    pub fn log(&mut self, level: tracing::Level, mut message: String) {
        if self.log_lines >= MAX_LOG_LINES {
            if self.dropped_log_lines == 0 {
                let (plugin, digest) = self.current_tags();
                tracing::warn!(target: "forge::plugin", plugin, digest, "log cap of {MAX_LOG_LINES} lines reached; dropping further lines");
            }
            self.dropped_log_lines += 1;
            return;
        }
        self.log_lines += 1;
        if message.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let (plugin, digest) = self.current_tags();
        match level {
            tracing::Level::ERROR => {
                tracing::error!(target: "forge::plugin", plugin, digest, "{message}")
            }
            tracing::Level::WARN => {
                tracing::warn!(target: "forge::plugin", plugin, digest, "{message}")
            }
            tracing::Level::INFO => {
                tracing::info!(target: "forge::plugin", plugin, digest, "{message}")
            }
            _ => tracing::debug!(target: "forge::plugin", plugin, digest, "{message}"),
        }
    }

    fn current_tags(&self) -> (&str, &str) {
        self.current
            .as_ref()
            .map(|(n, d)| (n.as_str(), d.as_str()))
            .unwrap_or(("?", "?"))
    }

    /// Turn a wasmtime error from instantiation or a call into a typed failure.
    pub fn classify(&self, err: &wasmtime::Error, deadline_ms: u64) -> PluginError {
        if self.memory_denied {
            return PluginError::Memory {
                cap_bytes: self.cap_bytes,
            };
        }
        match err.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => PluginError::Deadline { deadline_ms },
            Some(trap) => PluginError::Trap(trap.to_string()),
            None => PluginError::Trap(format!("{err:#}")),
        }
    }
}

impl ResourceLimiter for HostState {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap_bytes {
            self.memory_denied = true;
            // An error (rather than `Ok(false)`) traps at once: guests written in Rust
            // would otherwise abort with an opaque `unreachable`.
            return Err(wasmtime::format_err!(
                "memory cap of {} bytes exceeded (wanted {desired})",
                self.cap_bytes
            ));
        }
        self.memory_bytes = self
            .memory_bytes
            .saturating_add(desired.saturating_sub(current));
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}
