//! Real Ray in process mode: what the kubelet needs to run KubeRay's Ray nodes and
//! submitters on an installed Ray ([`install`]), each node on ports of its own
//! ([`ports`]) and with a temp dir of its own ([`temp_dir`]) behind the pod's `ray` and the fate-sharing supervisor ([`image`]), every
//! Service name resolved through the emulated pod network ([`dns`]), and the operator's
//! client of a head's Jobs API ([`jobs_api`]). The kubelet's side is
//! `kubelet/real_ray.rs`.

pub mod dns;
pub mod image;
pub mod install;
pub mod jobs_api;
pub mod ports;
pub mod temp_dir;
