//! Logging from a plugin: the host's imported `log` function in a component, a
//! per-thread capture buffer when the plugin runs natively (tests read it with
//! [`take_logs`], also exported by the [`harness`](crate::harness)).

#[cfg(not(target_arch = "wasm32"))]
use std::cell::RefCell;

pub use crate::bindings::forge::policy::host::Level;

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static LOGS: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
}

/// Take the log lines this thread's plugin calls emitted so far (native runs only;
/// in a component the host receives them).
pub fn take_logs() -> Vec<(Level, String)> {
    #[cfg(not(target_arch = "wasm32"))]
    return LOGS.with(|l| std::mem::take(&mut *l.borrow_mut()));
    #[cfg(target_arch = "wasm32")]
    Vec::new()
}

/// Write one line to the gateway's log (tagged by the host with the plugin's name and
/// digest). The host keeps at most 64 lines of 1 KiB per call.
pub fn write(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::forge::policy::host::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    LOGS.with(|l| l.borrow_mut().push((level, message.to_string())));
}

/// Log at debug level.
pub fn debug(message: &str) {
    write(Level::Debug, message);
}

/// Log at info level.
pub fn info(message: &str) {
    write(Level::Info, message);
}

/// Log at warn level.
pub fn warn(message: &str) {
    write(Level::Warn, message);
}

/// Log at error level.
pub fn error(message: &str) {
    write(Level::Error, message);
}
