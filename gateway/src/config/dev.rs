//! The defaults `forge-gateway dev` layers under the environment, so that an empty
//! environment yields a valid config without a cluster.

use std::collections::HashMap;

/// Default values for the embedded `dev` mode, to be layered under the environment
/// (the environment wins): a local fleet and a Ray version.
pub fn dev_defaults() -> HashMap<String, String> {
    HashMap::from([
        ("FORGE_DEFAULT_FLEET_KIND".to_string(), "local".to_string()),
        (
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        ),
    ])
}
