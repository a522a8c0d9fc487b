//! The object stores' integration tests, one binary: the S3 store against a real
//! S3-compatible server (s3s-fs, in-process) and the local store with its signed-URL
//! routes. Shared helpers live in `support`.

mod local;
mod s3;
mod support;
