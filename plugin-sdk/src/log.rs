//! Logging from a plugin: the host's imported `log` function in a component, a
//! capture buffer when the plugin runs natively under the [`harness`](crate::harness).

pub use crate::bindings::forge::policy::host::Level;

/// Write one line to the gateway's log (tagged by the host with the plugin's name and
/// digest). The host keeps at most 64 lines of 1 KiB per call.
pub fn write(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::forge::policy::host::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    crate::harness::capture_log(level, message);
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
