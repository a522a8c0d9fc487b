//! The defaults `forge-gateway dev` layers under the environment, so that an empty
//! environment yields a valid config without a cluster.

use std::collections::HashMap;

/// Default values for the embedded `dev` mode, to be layered under the environment
/// (the environment wins): a local fleet, a Ray version, playgrounds on (the
/// emulator runs its OpenAI-compatible stand-in for this vLLM image), and a small Ray
/// object store per machine (every emulated Ray node shares this one host: the
/// production default, 30 % of a machine's memory, would be GiBs each).
pub fn dev_defaults() -> HashMap<String, String> {
    HashMap::from([
        (
            "FORGE_K8S_OBJECT_STORE_MEMORY".to_string(),
            "128Mi".to_string(),
        ),
        (
            "FORGE_IMAGE_VLLM".to_string(),
            "vllm/vllm-openai:v0.11.0".to_string(),
        ),
        ("FORGE_DEFAULT_FLEET_KIND".to_string(), "local".to_string()),
        (
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        ),
    ])
}
