//! Object storage as the gateway uses it: capsules, archived logs and plugin blobs,
//! in S3-compatible storage or the local store whose signed URLs the gateway serves.
//! The gateway names the storage crate's types only through this module.

pub use forge_object_store::{
    LocalStore, ObjectRange, ObjectStore, PutOutcome, S3Config, S3Store,
    StoreError as ObjectStoreError, attempt_log_index_key, local_routes, log_index_key, log_key,
    plugin_key, pod_log_key, upload_key,
};
