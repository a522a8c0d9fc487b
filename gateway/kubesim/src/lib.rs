//! Kubernetes + KubeRay emulator (see the crate README section).
