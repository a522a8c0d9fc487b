//! Where the pods' servers listen: the simulated pod network. A process-mode pod
//! that really serves HTTP (the inference stand-in) listens on a loopback port the
//! kubelet registers here under `(namespace, pod, containerPort)`; the API server's
//! `pods/proxy` subresource looks the port up here instead of dialling the pod IP,
//! which is not routable on the host.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

/// `(namespace, pod, containerPort)` to the host address serving it.
#[derive(Debug, Default)]
pub struct PodEndpoints {
    map: Mutex<HashMap<(String, String, u16), SocketAddr>>,
}

impl PodEndpoints {
    /// Records that `port` of pod `ns/pod` is served at `addr`.
    pub fn register(&self, ns: &str, pod: &str, port: u16, addr: SocketAddr) {
        self.lock()
            .insert((ns.to_owned(), pod.to_owned(), port), addr);
    }

    /// Forgets every port of pod `ns/pod` (the pod stopped or was deleted).
    pub fn remove_pod(&self, ns: &str, pod: &str) {
        self.lock().retain(|(n, p, _), _| !(n == ns && p == pod));
    }

    /// The address serving `port` of pod `ns/pod`, if anything listens there.
    pub fn lookup(&self, ns: &str, pod: &str, port: u16) -> Option<SocketAddr> {
        self.lock()
            .get(&(ns.to_owned(), pod.to_owned(), port))
            .copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String, u16), SocketAddr>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_ports_are_found_until_the_pod_goes() {
        let e = PodEndpoints::default();
        let addr = SocketAddr::from(([127, 0, 0, 1], 4321));
        e.register("ns", "p", 8000, addr);
        e.register("ns", "q", 8000, addr);
        assert_eq!(e.lookup("ns", "p", 8000), Some(addr));
        assert_eq!(e.lookup("ns", "p", 8001), None);
        assert_eq!(e.lookup("other", "p", 8000), None);
        e.remove_pod("ns", "p");
        assert_eq!(e.lookup("ns", "p", 8000), None);
        assert_eq!(e.lookup("ns", "q", 8000), Some(addr));
    }
}
