//! The address one emulated Ray node listens on. Every pod shares the host's network,
//! so each Ray node gets an IP of its own in the loopback range (`127.77.x.y`: Ray
//! binds most listeners to its node IP, and a bootstrap address of `127.0.0.1` would be
//! "resolved" by Ray to the machine's outward IP) and free ports of its own for every
//! port Ray opens, some of which bind every interface (and a worker-port range of its
//! own). They are passed to `ray start` after the flags KubeRay generated, so they win
//! (click keeps the last value of a flag). The container ports KubeRay declares (6379,
//! 8265, 10001, 8080, 52365) map to them in [`crate::endpoints::PodEndpoints`].

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ports handed out for Ray's worker processes: slots of [`WORKER_SLOT`] ports between
/// these bounds (below Linux's ephemeral range, above Ray's own default range).
const WORKER_PORTS_FROM: u16 = 20_000;
const WORKER_SLOTS: u32 = 120;
const WORKER_SLOT: u16 = 100;

/// The IP and ports of one Ray node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePorts {
    pub ip: Ipv4Addr,
    pub gcs: u16,
    pub dashboard: u16,
    pub client: u16,
    pub metrics: u16,
    pub agent_http: u16,
    pub agent_grpc: u16,
    pub runtime_env_agent: u16,
    pub node_manager: u16,
    pub object_manager: u16,
    pub workers: (u16, u16),
}

fn worker_range() -> (u16, u16) {
    static NEXT: std::sync::OnceLock<AtomicU32> = std::sync::OnceLock::new();
    // Start at a random slot: emulators in other processes hand out ranges too.
    let next = NEXT.get_or_init(|| AtomicU32::new(rand::random::<u32>() % WORKER_SLOTS));
    let slot = next.fetch_add(1, Ordering::Relaxed) % WORKER_SLOTS;
    let from = WORKER_PORTS_FROM + u16::try_from(slot).unwrap_or(0) * WORKER_SLOT;
    (from, from + WORKER_SLOT - 1)
}

/// A loopback IP no other node of this process has been given lately:
/// `127.77.0.1`–`127.77.255.254`, from a random start.
fn node_ip() -> Ipv4Addr {
    static NEXT: std::sync::OnceLock<AtomicU32> = std::sync::OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU32::new(rand::random::<u32>()));
    let n = next.fetch_add(1, Ordering::Relaxed) % 65_534 + 1;
    let [_, _, a, b] = n.to_be_bytes();
    Ipv4Addr::new(127, 77, a, b)
}

impl NodePorts {
    /// A node IP and free ports on it for every listener of a node (held until all
    /// are chosen, so none is chosen twice).
    pub fn allocate() -> std::io::Result<Self> {
        let ip = node_ip();
        let held: Vec<TcpListener> = (0..9)
            .map(|_| TcpListener::bind(SocketAddr::from((ip, 0))))
            .collect::<Result<_, _>>()?;
        let p: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            ip,
            gcs: p[0],
            dashboard: p[1],
            client: p[2],
            metrics: p[3],
            agent_http: p[4],
            agent_grpc: p[5],
            runtime_env_agent: p[6],
            node_manager: p[7],
            object_manager: p[8],
            workers: worker_range(),
        })
    }

    /// The container ports KubeRay's pods declare, and where this node serves them.
    pub fn container_ports(&self, head: bool) -> Vec<(u16, SocketAddr)> {
        let mut ports = vec![(8080, self.metrics), (52365, self.agent_http)];
        if head {
            ports.extend([
                (6379, self.gcs),
                (8265, self.dashboard),
                (10001, self.client),
            ]);
        }
        ports
            .into_iter()
            .map(|(c, p)| (c, SocketAddr::from((self.ip, p))))
            .collect()
    }

    /// `port` of this node's IP.
    pub fn at(&self, port: u16) -> SocketAddr {
        SocketAddr::from((self.ip, port))
    }

    /// The flags that put the node on these ports (a worker's `--address` is its
    /// command's, rewritten by [`super::dns`]).
    pub fn flags(&self, head: bool) -> Vec<String> {
        let mut f = vec![
            format!("--node-ip-address={}", self.ip),
            format!("--metrics-export-port={}", self.metrics),
            format!("--dashboard-agent-listen-port={}", self.agent_http),
            format!("--dashboard-agent-grpc-port={}", self.agent_grpc),
            format!("--runtime-env-agent-port={}", self.runtime_env_agent),
            format!("--node-manager-port={}", self.node_manager),
            format!("--object-manager-port={}", self.object_manager),
            format!("--min-worker-port={}", self.workers.0),
            format!("--max-worker-port={}", self.workers.1),
        ];
        if head {
            f.extend([
                format!("--port={}", self.gcs),
                format!("--dashboard-host={}", self.ip),
                format!("--dashboard-port={}", self.dashboard),
                format!("--ray-client-server-port={}", self.client),
            ]);
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_gets_distinct_ports_and_a_worker_range_of_its_own() {
        let a = NodePorts::allocate().expect("ports");
        let b = NodePorts::allocate().expect("ports");
        let mut all = vec![a.gcs, a.dashboard, a.client, a.metrics, a.agent_http];
        all.extend([
            a.agent_grpc,
            a.runtime_env_agent,
            a.node_manager,
            a.object_manager,
        ]);
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "no port twice");
        assert_ne!(a.workers, b.workers);
        assert_ne!(a.ip, b.ip);
        assert!(
            a.ip.is_loopback() && a.ip != Ipv4Addr::LOCALHOST,
            "{}",
            a.ip
        );
        assert_eq!(a.workers.1 - a.workers.0 + 1, WORKER_SLOT);
        let head = a.flags(true);
        assert!(head.contains(&format!("--port={}", a.gcs)), "{head:?}");
        let worker = b.flags(false);
        assert!(
            !worker.iter().any(|f| f.starts_with("--port=")),
            "{worker:?}"
        );
        assert_eq!(
            a.container_ports(true).iter().find(|(c, _)| *c == 6379),
            Some(&(6379, a.at(a.gcs)))
        );
    }
}
