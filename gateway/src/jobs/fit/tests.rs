//! Tests of the gang fit: whole jobs or nothing, best fit, several series, CPU and
//! memory, taints and tolerations, node selectors and affinity, and the reasons given.

use forge_policy_host::model::{
    NodeSelectorRequirement, NodeSelectorTerm, SelectorOperator, Taint, TaintEffect,
    TolerationOperator,
};

use super::*;

const CPU: u64 = 64_000;
const MEM: u64 = 512 << 30;

fn room(name: &str, series: &str, gpus: u32) -> NodeRoom {
    NodeRoom {
        fleet: "default".into(),
        name: name.into(),
        series: series.into(),
        labels: [("starforge/gpu-series".to_string(), series.to_string())].into(),
        taints: Vec::new(),
        gpus,
        cpu_millis: CPU,
        memory_bytes: MEM,
    }
}

fn rooms(spec: &[(&str, &[u32])]) -> Vec<NodeRoom> {
    spec.iter()
        .flat_map(|(s, gpus)| {
            gpus.iter()
                .enumerate()
                .map(move |(i, g)| room(&format!("{s}-{i}"), s, *g))
        })
        .collect()
}

fn gpus_of(rooms: &[NodeRoom], series: &str) -> Vec<u32> {
    rooms
        .iter()
        .filter(|r| r.series == series)
        .map(|r| r.gpus)
        .collect()
}

fn pool(series: &str, nodes: u32, gpus: u32) -> PoolDemand {
    PoolDemand {
        series: series.into(),
        nodes,
        gpus_per_node: gpus,
        cpu_millis: 8_000,
        memory_bytes: 32 << 30,
        ..PoolDemand::default()
    }
}

fn gpu_taint() -> Taint {
    Taint {
        key: "nvidia.com/gpu".into(),
        value: Some("present".into()),
        effect: TaintEffect::NoSchedule,
    }
}

#[test]
fn whole_job_or_nothing() {
    let mut f = Rooms::new(rooms(&[("h100", &[8, 8, 4])]));
    assert!(f.reserve(&[pool("h100", 2, 8)]).is_ok());
    assert_eq!(gpus_of(&f.nodes(), "h100"), vec![0, 0, 4]);
    let err = f
        .reserve(&[pool("h100", 2, 4)])
        .expect_err("only one 4-slot left");
    assert_eq!((err.needed, err.free), (8, 4));
    assert_eq!(err.code(), "capacity.no-room");
    assert_eq!(
        gpus_of(&f.nodes(), "h100"),
        vec![0, 0, 4],
        "a failed fit changes nothing"
    );
}

#[test]
fn total_free_is_not_enough_without_whole_machines() {
    let mut f = Rooms::new(rooms(&[("h100", &[4, 4])]));
    let err = f.reserve(&[pool("h100", 1, 8)]).expect_err("fragmented");
    assert_eq!(
        err.to_string(),
        "waiting for room: needs 8 h100 GPUs on whole machines, 8 free"
    );
}

#[test]
fn best_fit_keeps_big_holes_for_big_machines() {
    let mut f = Rooms::new(rooms(&[("h100", &[8, 2])]));
    assert!(f.reserve(&[pool("h100", 1, 2), pool("h100", 1, 8)]).is_ok());
    assert_eq!(gpus_of(&f.nodes(), "h100"), vec![0, 0]);
}

#[test]
fn pools_of_several_series_must_all_fit() {
    let mut f = Rooms::new(rooms(&[("h100", &[8])]));
    let err = f
        .reserve(&[pool("h100", 1, 8), pool("h200", 1, 8)])
        .expect_err("h200");
    assert_eq!(err.series, "h200");
    assert_eq!(gpus_of(&f.nodes(), "h100"), vec![8]);
    let err = f
        .reserve(&[pool("a100", 1, 1)])
        .expect_err("unknown series");
    assert_eq!((err.series.as_str(), err.free), ("a100", 0));
}

#[test]
fn cpu_and_memory_must_fit_on_the_same_node_as_the_gpus() {
    let mut nodes = rooms(&[("h100", &[8, 8])]);
    nodes[0].cpu_millis = 4_000;
    let mut f = Rooms::new(nodes);
    let mut wide = pool("h100", 2, 8);
    wide.cpu_millis = 8_000;
    let err = f.reserve(&[wide.clone()]).expect_err("one node lacks CPU");
    assert_eq!(
        err.cause,
        NoFitCause::CpuOrMemory {
            cpu_millis: 8_000,
            memory_bytes: 32 << 30
        }
    );
    assert!(err.to_string().contains("8 CPU and 32Gi memory"), "{err}");
    wide.nodes = 1;
    assert!(f.reserve(&[wide]).is_ok());
    assert_eq!(f.nodes()[1].cpu_millis, CPU - 8_000);
    assert_eq!(f.nodes()[1].memory_bytes, MEM - (32 << 30));
}

#[test]
fn taints_keep_jobs_off_unless_tolerated_and_the_reason_says_so() {
    let mut nodes = rooms(&[("h100", &[8, 8])]);
    for r in &mut nodes {
        r.taints.push(gpu_taint());
    }
    let mut f = Rooms::new(nodes);
    let err = f.reserve(&[pool("h100", 1, 8)]).expect_err("tainted");
    assert_eq!(err.code(), "capacity.tainted");
    assert_eq!(err.free, 0);
    let text = err.to_string();
    assert!(
        text.contains("16 more are on nodes with taints")
            && text.contains("nvidia.com/gpu=present:NoSchedule"),
        "{text}"
    );

    let mut tolerant = pool("h100", 2, 8);
    tolerant.tolerations.push(Toleration {
        key: Some("nvidia.com/gpu".into()),
        operator: TolerationOperator::Exists,
        value: None,
        effect: None,
    });
    assert!(f.reserve(&[tolerant]).is_ok());
    assert_eq!(gpus_of(&f.nodes(), "h100"), vec![0, 0]);
    assert_eq!(
        f.totals(&[]).get("h100"),
        None,
        "untolerated nodes are not counted"
    );
}

#[test]
fn node_selector_and_required_affinity_restrict_the_nodes() {
    let mut nodes = rooms(&[("h100", &[8, 8])]);
    nodes[1].labels.insert("zone".into(), "b".into());
    let mut f = Rooms::new(nodes);
    let mut zoned = pool("h100", 1, 8);
    zoned.affinity.required.push(NodeSelectorTerm {
        match_expressions: vec![NodeSelectorRequirement {
            key: "zone".into(),
            operator: SelectorOperator::In,
            values: vec!["b".into()],
        }],
    });
    assert!(f.reserve(&[zoned.clone()]).is_ok());
    assert_eq!(gpus_of(&f.nodes(), "h100"), vec![8, 0]);
    assert!(f.reserve(&[zoned]).is_err(), "zone b is full");

    let mut selected = pool("h100", 1, 8);
    selected.node_selector.insert("zone".into(), "c".into());
    assert!(f.reserve(&[selected]).is_err(), "no node in zone c");
}

#[test]
fn unbound_machines_reserve_what_fits() {
    let mut f = Rooms::new(rooms(&[("h100", &[8, 3])]));
    f.reserve_partially(&pool("h100", 3, 4), None);
    assert_eq!(
        gpus_of(&f.nodes(), "h100"),
        vec![0, 3],
        "two machines of 4 fit, the third not"
    );
    assert_eq!(f.totals(&[])["h100"], (3, 3));
}

#[test]
fn a_shape_that_did_not_fit_is_not_tried_again_and_its_reason_stays_true() {
    let mut f = Rooms::new(rooms(&[("h100", &[8, 8, 4]), ("h200", &[8])]));
    // Three whole machines of 8 do not fit: remembered for the shape.
    let err = f
        .reserve(&[pool("h100", 3, 8)])
        .expect_err("two 8-GPU nodes");
    assert_eq!((err.needed, err.free), (24, 20));
    // More machines of that shape: refused from memory, with this job's need.
    let err = f
        .reserve(&[pool("h200", 1, 8), pool("h100", 4, 8)])
        .expect_err("remembered");
    assert_eq!(
        (err.series.as_str(), err.needed, err.free),
        ("h100", 32, 20)
    );
    assert_eq!(gpus_of(&f.nodes(), "h200"), vec![8], "nothing taken");
    // Fewer machines of it may fit, and do.
    assert!(f.reserve(&[pool("h100", 1, 8)]).is_ok());
    // Room was taken since: the remembered failure still holds, its numbers are new.
    let err = f.reserve(&[pool("h100", 3, 8)]).expect_err("still too big");
    assert_eq!((err.needed, err.free), (24, 12));
    // A pool that failed only after its own job's other pool took room there is not
    // remembered as a shape that cannot fit: alone it fits.
    let mut g = Rooms::new(rooms(&[("h100", &[8, 4])]));
    let err = g
        .reserve(&[pool("h100", 1, 8), pool("h100", 1, 8)])
        .expect_err("one 8-GPU node");
    assert_eq!(err.series, "h100");
    assert!(g.reserve(&[pool("h100", 1, 4)]).is_ok());
    assert!(g.reserve(&[pool("h100", 1, 8)]).is_ok());
}

/// Nodes of `series` in `fleet`, one per entry of `gpus`.
fn fleet_rooms(fleet: &str, series: &str, gpus: &[u32]) -> Vec<NodeRoom> {
    gpus.iter()
        .enumerate()
        .map(|(i, g)| NodeRoom {
            fleet: fleet.into(),
            ..room(&format!("{fleet}-{series}-{i}"), series, *g)
        })
        .collect()
}

fn free_in(rooms: &Rooms, fleet: &str) -> Vec<u32> {
    rooms
        .nodes()
        .iter()
        .filter(|r| r.fleet == fleet)
        .map(|r| r.gpus)
        .collect()
}

#[test]
fn a_gang_is_never_split_across_fleets() {
    let mut nodes = fleet_rooms("eu", "h100", &[8]);
    nodes.extend(fleet_rooms("us", "h100", &[8]));
    let mut f = Rooms::new(nodes);
    let err = f
        .reserve(&[pool("h100", 2, 8)])
        .expect_err("16 GPUs free, but 8 in each fleet");
    assert_eq!((err.needed, err.free), (16, 8));
    assert_eq!(err.cause, NoFitCause::Gpus);
    assert_eq!((free_in(&f, "eu"), free_in(&f, "us")), (vec![8], vec![8]));
    // Equal fits: the fleet configured first.
    assert_eq!(f.reserve(&[pool("h100", 1, 8)]).as_deref(), Ok("eu"));
    assert_eq!(f.reserve(&[pool("h100", 1, 8)]).as_deref(), Ok("us"));
    assert!(f.reserve(&[pool("h100", 1, 1)]).is_err(), "both are full");
}

#[test]
fn the_fleet_left_with_the_fewest_free_gpus_wins() {
    let mut nodes = fleet_rooms("eu", "h100", &[8, 8]);
    nodes.extend(fleet_rooms("us", "h100", &[8, 4]));
    nodes.extend(fleet_rooms("us", "a100", &[8]));
    let mut f = Rooms::new(nodes);
    // eu would keep 12 of its h100s free, us 8 (its a100s do not count).
    assert_eq!(f.reserve(&[pool("h100", 1, 4)]).as_deref(), Ok("us"));
    assert_eq!(free_in(&f, "us"), vec![8, 0, 8]);
    // Only eu has two whole 8-GPU machines left.
    assert_eq!(f.reserve(&[pool("h100", 2, 8)]).as_deref(), Ok("eu"));
    // A job of two series runs where both are.
    assert_eq!(
        f.reserve(&[pool("h100", 1, 8), pool("a100", 1, 8)])
            .as_deref(),
        Ok("us")
    );
}

#[test]
fn a_placement_pins_its_pools_to_fleets() {
    let mut nodes = fleet_rooms("eu", "h100", &[8, 8]);
    nodes.extend(fleet_rooms("us", "h100", &[8, 4]));
    let mut f = Rooms::new(nodes);
    let pinned = |fleets: &[&str], nodes, gpus| PoolDemand {
        fleets: fleets.iter().map(ToString::to_string).collect(),
        ..pool("h100", nodes, gpus)
    };
    // us is the better fit, but the pool may run in eu only.
    assert_eq!(f.reserve(&[pinned(&["eu"], 1, 4)]).as_deref(), Ok("eu"));
    assert_eq!(free_in(&f, "us"), vec![8, 4]);
    // Pinned to a fleet without the room: the reason is that fleet's.
    let err = f
        .reserve(&[pinned(&["us"], 2, 8)])
        .expect_err("us has one 8-GPU machine");
    assert_eq!((err.needed, err.free), (16, 12));
    // Pools pinned apart: no one fleet takes the job.
    let err = f
        .reserve(&[pinned(&["eu"], 1, 1), pinned(&["us"], 1, 1)])
        .expect_err("a job is never split");
    assert_eq!(err.code(), "capacity.no-fleet");
    assert_eq!(
        err.cause,
        NoFitCause::Fleets {
            known: vec!["eu".into(), "us".into()]
        }
    );
    assert!(
        err.to_string().contains("a job runs in exactly one fleet"),
        "{err}"
    );
}

#[test]
fn unbound_machines_are_reserved_in_their_jobs_fleet() {
    let mut nodes = fleet_rooms("eu", "h100", &[8]);
    nodes.extend(fleet_rooms("us", "h100", &[8]));
    let mut f = Rooms::new(nodes);
    f.reserve_partially(&pool("h100", 1, 8), Some("us"));
    assert_eq!((free_in(&f, "eu"), free_in(&f, "us")), (vec![8], vec![0]));
    // A job recorded without a fleet ran in the one cluster: the first.
    f.reserve_partially(&pool("h100", 1, 8), None);
    assert_eq!(free_in(&f, "eu"), vec![0]);
}

#[test]
fn a_fleet_without_nodes_here_takes_no_room_and_a_failure_is_remembered_per_fleet() {
    let mut nodes = fleet_rooms("eu", "h100", &[4]);
    nodes.extend(fleet_rooms("us", "h100", &[8]));
    let mut f = Rooms::new(nodes);
    // A dispatched job recorded in a fleet with no GPU nodes (gone, or none of the
    // series): nothing here is its room.
    f.reserve_partially(&pool("h100", 1, 4), Some("ap"));
    assert_eq!((free_in(&f, "eu"), free_in(&f, "us")), (vec![4], vec![8]));
    // Eight GPUs fit in `us` only: `eu` is tried first and fails, and that failure is
    // remembered for `eu` alone, so the same shape is still tried, and fits, in `us`.
    assert_eq!(f.reserve(&[pool("h100", 1, 8)]), Ok("us".to_string()));
    let err = f
        .reserve(&[pool("h100", 1, 8)])
        .expect_err("both full for 8");
    assert_eq!((err.code(), err.free), ("capacity.no-room", 4), "{err}");
    assert_eq!(f.reserve(&[pool("h100", 1, 4)]), Ok("eu".to_string()));
}

/// A job's submitter pod, as `dispatch::demand::submitter` makes it: 1 CPU, 1 GiB, no
/// GPUs, any node.
fn submitter_of(series: &str) -> PoolDemand {
    PoolDemand {
        series: series.into(),
        any_series: true,
        nodes: 1,
        cpu_millis: 1_000,
        memory_bytes: 1 << 30,
        ..PoolDemand::default()
    }
}

/// The stall stop 64 found: eight one-GPU jobs whose heads take 8 CPUs each fill a
/// 64-CPU node, and their submitters (the drivers) then fit nowhere. With the
/// submitter in the gang, seven jobs run and the eighth waits for room.
#[test]
fn a_gang_includes_its_submitter_so_heads_never_starve_their_drivers() {
    let mut f = Rooms::new(rooms(&[("h100", &[8])]));
    for i in 0..7 {
        assert!(
            f.reserve(&[pool("h100", 1, 1), submitter_of("h100")])
                .is_ok(),
            "job {i}"
        );
    }
    let left = f.nodes()[0].clone();
    assert_eq!((left.gpus, left.cpu_millis), (1, CPU - 7 * 9_000));
    let err = f
        .reserve(&[pool("h100", 1, 1), submitter_of("h100")])
        .expect_err("1 CPU left: the eighth head does not fit");
    assert!(
        matches!(err.cause, NoFitCause::CpuOrMemory { .. }),
        "{err:?}"
    );
    assert_eq!(f.nodes()[0], left, "a failed fit changes nothing");
}

#[test]
fn a_gang_whose_machines_fit_waits_when_its_submitter_does_not() {
    let mut nodes = rooms(&[("h100", &[8])]);
    nodes[0].cpu_millis = 8_000;
    let mut f = Rooms::new(nodes);
    let err = f
        .reserve(&[pool("h100", 1, 8), submitter_of("h100")])
        .expect_err("the head takes every CPU");
    assert_eq!(err.code(), "capacity.no-room");
    assert!(
        matches!(
            err.cause,
            NoFitCause::Submitter {
                cpu_millis: 1_000,
                memory_bytes: 1_073_741_824
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "waiting for room: needs 8 h100 GPUs on whole machines, 8 free; the job's machines \
         fit, but no node its submitter pod (the driver) may use also has 1 CPU and 1Gi \
         memory free"
    );
    assert_eq!(f.nodes()[0].gpus, 8, "a failed fit changes nothing");
    // The head alone fits: that was the stall.
    assert!(f.reserve(&[pool("h100", 1, 8)]).is_ok());
}

/// An 8-GPU h100 node with `gpu_node_cpu` free, and a CPU node (no series label)
/// with `taints`.
fn gpu_and_cpu_nodes(gpu_node_cpu: u64, taints: Vec<Taint>) -> Vec<NodeRoom> {
    let mut nodes = rooms(&[("h100", &[8])]);
    nodes[0].cpu_millis = gpu_node_cpu;
    let mut cpu = room("cpu-0", crate::cluster::nodes::NO_SERIES, 0);
    cpu.labels.clear();
    cpu.taints = taints;
    nodes.push(cpu);
    nodes
}

#[test]
fn a_submitter_may_run_on_a_node_of_no_series() {
    let mut f = Rooms::new(gpu_and_cpu_nodes(8_000, Vec::new()));
    assert!(
        f.reserve(&[pool("h100", 1, 8), submitter_of("h100")])
            .is_ok()
    );
    let after = f.nodes();
    assert_eq!(
        (after[0].gpus, after[0].cpu_millis),
        (0, 0),
        "the head takes the GPU node's CPU"
    );
    assert_eq!(
        after[1].cpu_millis,
        CPU - 1_000,
        "the submitter the CPU node's"
    );
    // A GPU pool never goes to a node of no series.
    let err = f.reserve(&[pool("h100", 1, 1)]).expect_err("no GPU left");
    assert_eq!(err.free, 0);
}

#[test]
fn a_submitter_keeps_to_the_nodes_its_tolerations_allow_and_to_the_gangs_fleet() {
    let mut nodes = gpu_and_cpu_nodes(8_000, vec![gpu_taint()]);
    let mut other = room("h100-far", "h100", 0);
    other.fleet = "far".into();
    nodes.push(other);
    let mut f = Rooms::new(nodes.clone());
    let err = f
        .reserve(&[pool("h100", 1, 8), submitter_of("h100")])
        .expect_err("the CPU node is tainted, and the far fleet's room is not the gang's");
    assert!(matches!(err.cause, NoFitCause::Submitter { .. }), "{err:?}");
    // Asked again, the same answer (alone it would fit on the GPU node: nothing is
    // remembered).
    let again = f
        .reserve(&[pool("h100", 1, 8), submitter_of("h100")])
        .expect_err("still");
    assert_eq!(again.cause, err.cause);

    let tolerant = |mut d: PoolDemand| {
        d.tolerations = vec![Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: TolerationOperator::Exists,
            value: None,
            effect: None,
        }];
        d
    };
    let mut f = Rooms::new(nodes);
    assert!(
        f.reserve(&[tolerant(pool("h100", 1, 8)), tolerant(submitter_of("h100"))])
            .is_ok()
    );
    assert_eq!(f.nodes()[1].cpu_millis, CPU - 1_000);
}

/// A submitter that fits nowhere even with nothing else taken stays refused for the
/// rest of the pass (remembered like a pool's shape); one that failed only beside
/// its job's machines is not remembered.
#[test]
fn a_submitter_that_fails_on_its_own_is_remembered_for_the_pass() {
    let mut nodes = gpu_and_cpu_nodes(8_000, vec![gpu_taint()]);
    nodes[0].cpu_millis = 500;
    let mut small = pool("h100", 1, 8);
    small.cpu_millis = 500;
    let mut f = Rooms::new(nodes);
    let err = f
        .reserve(&[small.clone(), submitter_of("h100")])
        .expect_err("500m left on the GPU node, the CPU node tainted");
    assert!(matches!(err.cause, NoFitCause::Submitter { .. }), "{err:?}");
    assert!(
        f.failed.keys().any(|s| s.eligible.any_series),
        "remembered: it fits on no node alone"
    );
    let again = f
        .reserve(&[small, submitter_of("h100")])
        .expect_err("still");
    assert_eq!(again.cause, err.cause);

    let mut f = Rooms::new(gpu_and_cpu_nodes(8_000, vec![gpu_taint()]));
    f.reserve(&[pool("h100", 1, 8), submitter_of("h100")])
        .expect_err("the head takes the GPU node's CPU");
    assert!(
        !f.failed.keys().any(|s| s.eligible.any_series),
        "alone it would fit on the GPU node: not remembered"
    );
}
