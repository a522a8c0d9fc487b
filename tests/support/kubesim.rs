//! The emulator presets these tests use, from the emulator's own test support
//! (`forge_kubesim::testing`, cargo feature `testing`).

pub use forge_kubesim::testing::start_process;
