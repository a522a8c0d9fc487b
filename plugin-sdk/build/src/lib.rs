//! Plugin build tool.
