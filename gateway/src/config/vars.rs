//! The table of every `FORGE_*` variable the gateway reads — the one place a variable
//! is named, defaulted, documented and parsed. The reader (`reader.rs`), the config
//! file's known-key check (`file.rs`) and README.md's Configuration table
//! (`table.rs`) are derived from [`VARS`].
//!
//! Adding a variable is one entry here (plus, for a new field, the field in
//! `model.rs` and its neutral value in `draft.rs`), then
//! `cargo run -p forge-gateway -- config-table --readme README.md`.

use std::path::PathBuf;

use super::descriptor::{Fallback, Var};
use super::draft::put;
use super::fleets::fleets_file;
use super::secret::Secret;
use super::values::{
    absolute_path, boolean, bucket, bytes_per_series, claim_name, cpus_per_series, dns_label,
    fleet_kind, framework, gpus_per_series, identity, image, int, isolation, label_key,
    label_value, postgres_url, quantity, ray_version, run_as_user, socket_addr, sub_path, text,
    tolerations, url,
};

/// The variable naming the optional config file (read before the others).
pub const CONFIG_FILE: &str = "FORGE_CONFIG_FILE";

/// The prefix of the framework image variables (`FORGE_IMAGE_NEMO_RL`).
pub const IMAGE_PREFIX: &str = "FORGE_IMAGE_";

/// The object storage group: all of its variables or none.
const S3: &str = "FORGE_S3_*";

/// No default, nothing to add.
const NONE: Fallback = Fallback::Unset("—");

/// The largest Kubernetes `int32` (TTL and deadline fields).
const INT32: i64 = i32::MAX as i64;

/// Every variable, in the order the docs list them.
pub static VARS: &[Var] = &[
    Var::new(
        CONFIG_FILE,
        NONE,
        |_, _, _| Ok(()), // read first, by `Config::from_env_map`
        "optional TOML (`.toml`) or YAML (`.yaml`/`.yml`) file with any of these variables; the environment wins",
    ),
    Var::new(
        "FORGE_DEFAULT_FLEET_KIND",
        Fallback::Value("kuberay"),
        |d, _, v| put(&mut d.cfg.fleet_kind, fleet_kind(v)),
        "fleet jobs run on: `kuberay` (RayJobs) or `local` (no cluster)",
    ),
    Var::new(
        "FORGE_FLEETS_FILE",
        Fallback::Unset("— (`FORGE_K8S_*` is the one fleet, `default`)"),
        |d, _, v| put(&mut d.cfg.fleets, fleets_file(v).map(Some)),
        "YAML list of the clusters jobs run in: `name`, `kind: kuberay`, `kubeconfig` (+ `context`) or `apiServer` (+ `tokenFile`, `caFile`), optional `namespace`, `labels` (see `gateway/src/config/fleets.rs`)",
    ),
    Var::pattern(
        IMAGE_PREFIX,
        "FORGE_IMAGE_<FRAMEWORK>",
        |d, var, v| {
            let image = image(v)?;
            let name = framework(&framework_of_image_var(var).unwrap_or_default())?;
            d.cfg.images.insert(name, image);
            Ok(())
        },
        "container image of a framework; `FORGE_IMAGE_NEMO_RL` serves framework `nemo-rl`. A job's framework must have one",
    ),
    Var::new(
        "FORGE_NEMO_RL_DIR",
        NONE,
        |d, _, v| put(&mut d.cfg.nemo_rl_dir, absolute_path(v).map(Some)),
        "absolute path of NeMo-RL inside its image",
    ),
    Var::new(
        "FORGE_K8S_API_SERVER",
        Fallback::Unset("— (kubeconfig / in-cluster)"),
        |d, _, v| put(&mut d.cfg.k8s.api_server, url(v).map(Some)),
        "Kubernetes API server URL (`https://…`)",
    ),
    Var::new(
        "FORGE_K8S_TOKEN",
        NONE,
        |d, _, v| put(&mut d.cfg.k8s.token, Ok(Some(Secret::new(v)))),
        "ServiceAccount bearer token; needs `FORGE_K8S_API_SERVER`",
    )
    .secret(),
    Var::new(
        "FORGE_K8S_CA_FILE",
        Fallback::Unset("— (the system's roots)"),
        |d, _, v| put(&mut d.cfg.k8s.ca_file, absolute_path(v).map(|p| Some(p.into()))),
        "PEM file of the API server's CA; needs `FORGE_K8S_API_SERVER`",
    ),
    Var::new(
        "FORGE_K8S_INSECURE_SKIP_TLS_VERIFY",
        Fallback::Value("false"),
        |d, _, v| put(&mut d.cfg.k8s.insecure_skip_tls_verify, boolean(v)),
        "`true` = do not verify the API server's certificate (test clusters only); needs `FORGE_K8S_API_SERVER`",
    ),
    Var::new(
        "FORGE_K8S_NAMESPACE",
        Fallback::Value("starforge"),
        |d, _, v| put(&mut d.cfg.k8s.namespace, dns_label(v)),
        "namespace of every object Forge creates",
    ),
    Var::new(
        "FORGE_K8S_GPU_NODE_LABEL",
        Fallback::Value("starforge/gpu-series"),
        |d, _, v| put(&mut d.cfg.k8s.gpu_node_label, label_key(v)),
        "node label key naming a node's GPU series (capacity and nodeSelector)",
    ),
    Var::new(
        "FORGE_K8S_SHM_SIZE",
        Fallback::Value("64Gi"),
        |d, _, v| put(&mut d.cfg.k8s.shm_size, quantity(v)),
        "size of the `/dev/shm` memory emptyDir (Kubernetes quantity)",
    ),
    Var::new(
        "FORGE_K8S_GPU_PASSTHROUGH",
        Fallback::Value("1"),
        |d, _, v| put(&mut d.cfg.k8s.gpu_passthrough, boolean(v)),
        "`0` = pods request no `nvidia.com/gpu` (Ray logical GPUs only; GPU-less test clusters)",
    ),
    Var::new(
        "FORGE_K8S_OPERATOR_NAMESPACE",
        Fallback::Value("kuberay-system"),
        |d, _, v| put(&mut d.cfg.k8s.operator_namespace, dns_label(v)),
        "namespace of the KubeRay operator: its pods may reach every job's Ray head (each RayJob's NetworkPolicy admits them)",
    ),
    Var::new(
        "FORGE_K8S_RUN_AS_USER",
        Fallback::Value("1000"),
        |d, _, v| put(&mut d.cfg.k8s.run_as_user, run_as_user(v)),
        "uid Ray containers run as (`runAsNonRoot`; `1000` is `ray` in the rayproject images), or `image` for images that must keep their own user",
    ),
    Var::new(
        "FORGE_K8S_GPU_COUNT_LABEL",
        Fallback::Value("starforge/gpu-count"),
        |d, _, v| put(&mut d.cfg.pods.gpu_count_label, label_key(v)),
        "node label holding a node's GPU count where nodes have no `nvidia.com/gpu` (GPU-less clusters; read when a node has no `nvidia.com/gpu`)",
    ),
    Var::new(
        "FORGE_K8S_GPUS_PER_NODE",
        NONE,
        |d, _, v| put(&mut d.cfg.pods.gpus_per_node, gpus_per_series(v)),
        "GPU count of nodes with neither `nvidia.com/gpu` nor the count label: `8` or per series `h100=8,*=4`",
    ),
    Var::new(
        "FORGE_K8S_GPU_TOLERATIONS",
        NONE,
        |d, _, v| put(&mut d.cfg.pods.tolerations, tolerations(v)),
        "tolerations of every Forge pod, `kubectl taint` form, comma-separated: `key=value:Effect`, `key:Effect`, `key`, `*`. Capacity and the gang fit count only nodes whose `NoSchedule`/`NoExecute` taints these (plus a placement's) tolerate",
    ),
    Var::new(
        "FORGE_K8S_CPUS_PER_NODE",
        Fallback::Value("8"),
        |d, _, v| put(&mut d.cfg.pods.cpus_per_node, cpus_per_series(v)),
        "CPUs of a machine whose pool names no `cpusPerNode` (requests = limits): `8` or per series `h100=88,*=8`",
    ),
    Var::new(
        "FORGE_K8S_MEMORY_PER_NODE",
        Fallback::Value("32Gi"),
        |d, _, v| put(&mut d.cfg.pods.memory_per_node, bytes_per_series(v)),
        "memory of a machine whose pool names no `memoryPerNode` (requests = limits): `32Gi` or per series `h100=900Gi,*=32Gi`",
    ),
    Var::new(
        "FORGE_K8S_OBJECT_STORE_MEMORY",
        Fallback::Unset("— (30% of the memory, at most `FORGE_K8S_SHM_SIZE`)"),
        |d, _, v| put(&mut d.cfg.pods.object_store_memory, bytes_per_series(v)),
        "Ray object store of a machine whose pool names no `objectStoreMemory`: a quantity, or per series",
    ),
    Var::new(
        "FORGE_STORAGE_ROOT",
        Fallback::Value("/starforge"),
        |d, _, v| put(&mut d.cfg.storage.root, absolute_path(v)),
        "the one storage root (absolute path)",
    ),
    Var::new(
        "FORGE_K8S_STORAGE_PVC",
        NONE,
        |d, _, v| put(&mut d.cfg.storage.pvc, claim_name(v).map(Some)),
        "claim behind the storage root; a job with `sharedStorage` mounts its team's directory `teams/<team>` of it at the root (or `FORGE_K8S_STORAGE_MOUNT`)",
    ),
    Var::new(
        "FORGE_K8S_STORAGE_SHARED",
        Fallback::Value("true"),
        |d, _, v| put(&mut d.cfg.storage.shared, boolean(v)),
        "`false` if the claim is ReadWriteOnce: multi-node jobs are then rejected",
    ),
    Var::new(
        "FORGE_K8S_STORAGE_MOUNT",
        NONE,
        |d, _, v| put(&mut d.cfg.storage.mount, absolute_path(v).map(Some)),
        "mount path when pods cannot mount at the root; needs `FORGE_K8S_STORAGE_PVC`",
    ),
    Var::new(
        "FORGE_K8S_STORAGE_COMMON_SUBPATH",
        NONE,
        |d, _, v| put(&mut d.cfg.storage.common_subpath, sub_path(v).map(Some)),
        "a directory of the storage claim every team's storage jobs also mount, read-only, at `<mount>/common` (data admins share); each team's own directory is `teams/<team>`; needs `FORGE_K8S_STORAGE_PVC`",
    ),
    Var::new(
        "FORGE_K8S_CORPUS_PVC",
        NONE,
        |d, _, v| put(&mut d.cfg.storage.corpus_pvc, claim_name(v).map(Some)),
        "optional read-only corpus claim (mounted at `<mount>/corpus` for jobs asking for it)",
    ),
    Var::new(
        "FORGE_KUBERAY_RAY_VERSION",
        Fallback::Unset("— (required for `kuberay`)"),
        |d, _, v| put(&mut d.cfg.kuberay.ray_version, ray_version(v).map(Some)),
        "`rayVersion` of every RayJob, e.g. `2.55.1`",
    ),
    Var::new(
        "FORGE_KUBERAY_TTL_SECONDS",
        Fallback::Value("600"),
        |d, _, v| put(&mut d.cfg.kuberay.ttl_seconds, int(v, 0, INT32)),
        "`ttlSecondsAfterFinished`: GC fallback if active cleanup fails (0..=2147483647)",
    ),
    Var::new(
        "FORGE_KUBERAY_PRERUNNING_DEADLINE_S",
        Fallback::Value("1800"),
        |d, _, v| put(&mut d.cfg.kuberay.prerunning_deadline_s, int(v, 1, INT32)),
        "default pre-running deadline (> 0): the RayJob's `preRunningDeadlineSeconds`, and enforced by the gateway too (an older operator ignores the field)",
    ),
    Var::new(
        "FORGE_S3_ENDPOINT",
        NONE,
        |d, _, v| put(&mut d.s3.endpoint, url(v).map(Some)),
        "object storage URL; all four `FORGE_S3_*` or none",
    )
    .group(S3),
    Var::new(
        "FORGE_S3_BUCKET",
        NONE,
        |d, _, v| put(&mut d.s3.bucket, bucket(v).map(Some)),
        "bucket for capsules",
    )
    .group(S3),
    Var::new(
        "FORGE_S3_ACCESS_KEY",
        NONE,
        |d, _, v| put(&mut d.s3.access_key, Ok(Some(Secret::new(v)))),
        "access key",
    )
    .secret()
    .group(S3),
    Var::new(
        "FORGE_S3_SECRET_KEY",
        NONE,
        |d, _, v| put(&mut d.s3.secret_key, Ok(Some(Secret::new(v)))),
        "secret key",
    )
    .secret()
    .group(S3),
    Var::new(
        "FORGE_LISTEN",
        Fallback::Value("127.0.0.1:8080"),
        |d, _, v| put(&mut d.cfg.gateway.listen, socket_addr(v)),
        "HTTP listen address",
    ),
    Var::new(
        "FORGE_DATA_DIR",
        Fallback::Value("./forge-data"),
        |d, _, v| put(&mut d.cfg.gateway.data_dir, text(v).map(PathBuf::from)),
        "data directory (SQLite job store, capsules in dev mode)",
    ),
    Var::new(
        "FORGE_DATABASE_URL",
        Fallback::Unset("— (SQLite: `<FORGE_DATA_DIR>/forge.sqlite3`)"),
        |d, _, v| put(&mut d.cfg.database.url, postgres_url(v).map(|u| Some(Secret::new(u)))),
        "PostgreSQL store shared by replicas (`postgres://user:password@host:5432/db?sslmode=verify-full`; `sslrootcert=<file>` for a private CA; several hosts `h1:5432,h2:5432` with `target_session_attrs=read-write` for a failover)",
    )
    .secret(),
    Var::new(
        "FORGE_INSTANCE",
        Fallback::Unset("— (a UUID generated into the store on first start)"),
        |d, _, v| put(&mut d.cfg.database.instance, label_value(v).map(Some)),
        "identity of this installation (a label value): labels every object it creates; it manages only its own RayJobs. Must match the one recorded in the store",
    ),
    Var::new(
        "FORGE_REPLICA",
        Fallback::Unset("— (the host name)"),
        |d, _, v| put(&mut d.cfg.database.replica, identity(v).map(Some)),
        "identity of this replica in the leader lease (the pod name)",
    ),
    Var::new(
        "FORGE_LEADER_LEASE_MS",
        Fallback::Value("15000"),
        |d, _, v| put(&mut d.cfg.leader.lease_ms, int(v, 100, 3_600_000)),
        "how long the leader lease holds without a renewal; another replica takes over after it",
    ),
    Var::new(
        "FORGE_LEADER_RENEW_DEADLINE_MS",
        Fallback::Value("10000"),
        |d, _, v| put(&mut d.cfg.leader.renew_deadline_ms, int(v, 50, 3_600_000)),
        "a leader that could not renew for this long stops dispatching (< the lease)",
    ),
    Var::new(
        "FORGE_LEADER_RETRY_MS",
        Fallback::Value("2000"),
        |d, _, v| put(&mut d.cfg.leader.retry_ms, int(v, 10, 3_600_000)),
        "how often the lease is renewed, or tried by followers (< the renew deadline)",
    ),
    Var::new(
        "FORGE_TOKENS_FILE",
        Fallback::Unset("`<FORGE_DATA_DIR>/tokens.yaml`"),
        |d, _, v| put(&mut d.cfg.gateway.tokens_file, Ok(Some(PathBuf::from(v)))),
        "bearer-token file (hashed tokens → team, role)",
    ),
    Var::new(
        "FORGE_METRICS_TOKEN",
        Fallback::Unset("— (admin tokens only)"),
        |d, _, v| put(&mut d.cfg.gateway.metrics_token, Ok(Some(Secret::new(v)))),
        "bearer token a Prometheus scraper presents at `/metrics` to see the per-plugin series (plugin names include team names); without it (or an admin token) `/metrics` shows only aggregates",
    )
    .secret(),
    Var::new(
        "FORGE_POLICY_DEADLINE_MS",
        Fallback::Value("50"),
        |d, _, v| put(&mut d.cfg.gateway.policy_deadline_ms, int(v, 1, 600_000)),
        "default wall-clock deadline of one policy plugin call; a plugin may be registered with its own (> 0)",
    ),
    Var::new(
        "FORGE_POLICY_MEMORY_MIB",
        Fallback::Value("32"),
        |d, _, v| put(&mut d.cfg.gateway.policy_memory_mib, int(v, 1, 65_536)),
        "default memory cap of one plugin instance; a plugin may be registered with its own (> 0)",
    ),
    Var::new(
        "FORGE_POLICY_MAX_MEMORY_MIB",
        Fallback::Value("256"),
        |d, _, v| put(&mut d.cfg.gateway.policy_max_memory_mib, int(v, 1, 65_536)),
        "largest memory cap a plugin may be registered with (`memoryMib` at upload; Python and TypeScript plugins carry an interpreter) (> 0)",
    ),
    Var::new(
        "FORGE_POLICY_MAX_DEADLINE_MS",
        Fallback::Value("1000"),
        |d, _, v| {
            put(
                &mut d.cfg.gateway.policy_max_deadline_ms,
                int(v, 1, 600_000),
            )
        },
        "largest per-call deadline a plugin may be registered with (`deadlineMs` at upload) (> 0)",
    ),
    Var::new(
        "FORGE_POLICY_CONCURRENCY",
        Fallback::Computed {
            shown: "number of CPUs",
            value: cpu_count,
        },
        |d, _, v| put(&mut d.cfg.gateway.policy_concurrency, int(v, 1, 4096)),
        "concurrent policy evaluations (> 0)",
    ),
    Var::new(
        "FORGE_POLICY_ISOLATION",
        Fallback::Value("warm"),
        |d, _, v| put(&mut d.cfg.gateway.policy_isolation, isolation(v)),
        "policy plugin instances: `warm` reuses an instance for later calls of the same plugin, settings and scope (a team's instances serve only that team; dropped on any failure, after 1000 calls or when its memory grew); `fresh` instantiates for every call. Decisions must not depend on earlier calls",
    ),
    Var::new(
        "FORGE_POLICY_VERIFY",
        Fallback::Value("0"),
        |d, _, v| put(&mut d.cfg.gateway.policy_verify_every, int(v, 0, 1_000_000)),
        "debug: re-run one in N decisions of a reused (warm) instance on a fresh instance and fail the admission closed (cause `nondeterministic`, logged and counted in the plugin metrics) when they differ; 0 = off, 1 = every reused call",
    ),
    Var::new(
        "FORGE_POLICY_SYNC_MS",
        Fallback::Value("1000"),
        |d, _, v| put(&mut d.cfg.gateway.policy_sync_ms, int(v, 1, 3_600_000)),
        "how often a gateway polls the store for policy changes made by other replicas (> 0)",
    ),
    Var::new(
        "FORGE_PLUGIN_MAX_KIB",
        Fallback::Value("32768"),
        |d, _, v| put(&mut d.cfg.gateway.plugin_max_kib, int(v, 1, 262_144)),
        "largest policy plugin component accepted (Rust plugins are ~100 KiB, Python and TypeScript ones 17-19 MiB) (1..=262144)",
    ),
    Var::new(
        "FORGE_TEAM_PLUGIN_MAX_COUNT",
        Fallback::Value("20"),
        |d, _, v| put(&mut d.cfg.gateway.team_plugin_max_count, int(v, 1, 10_000)),
        "plugin versions one team may register (> 0)",
    ),
    Var::new(
        "FORGE_TEAM_PLUGIN_MAX_MIB",
        Fallback::Value("256"),
        |d, _, v| put(&mut d.cfg.gateway.team_plugin_max_mib, int(v, 1, 65_536)),
        "total plugin bytes one team may register (must hold one maximal plugin)",
    ),
    Var::new(
        "FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR",
        Fallback::Value("20"),
        |d, _, v| put(&mut d.cfg.gateway.plugin_failed_uploads_per_hour, int(v, 0, 1_000_000)),
        "failed plugin uploads one team may make per hour on each replica, with bursts up to that many (0: unlimited); beyond, its uploads get 429 `rate-limited` with `Retry-After` before anything is compiled",
    ),
    Var::new(
        "FORGE_PLUGIN_COMPILE_WORKERS",
        Fallback::Value("1"),
        |d, _, v| put(&mut d.cfg.gateway.plugin_compile_workers, int(v, 1, 64)),
        "threads that compile uploaded plugins; when all are busy and 4 more wait, uploads get 503 `plugin.compiler-busy` (1..=64)",
    ),
    Var::new(
        "FORGE_PLUGIN_COMPILE_TIMEOUT_S",
        Fallback::Value("120"),
        |d, _, v| put(&mut d.cfg.gateway.plugin_compile_timeout_s, int(v, 1, 3600)),
        "longest an upload waits for its plugin to compile, queueing included; beyond, 422 `plugin.compile-timeout` (1..=3600)",
    ),
    Var::new(
        "FORGE_POLICY_MAX_CHAIN_LINKS",
        Fallback::Value("16"),
        |d, _, v| put(&mut d.cfg.gateway.policy_max_chain_links, int(v, 1, 256)),
        "most plugins in one chain (the global chain, or a team's); a longer chain gets 422 `policy.chain-too-long` (1..=256)",
    ),
    Var::new(
        "FORGE_MAX_BODY_MIB",
        Fallback::Value("256"),
        |d, _, v| put(&mut d.cfg.gateway.max_body_mib, int(v, 1, 1_048_576)),
        "maximum body of the bulk routes: a submission with its code archive (`POST /v1/jobs`), an upload chunk, a plugin upload (MiB, > 0)",
    ),
    Var::new(
        "FORGE_MAX_DOCUMENT_KIB",
        Fallback::Value("1024"),
        |d, _, v| put(&mut d.cfg.gateway.max_document_kib, int(v, 1, 65_536)),
        "maximum body of every request that is not a code archive or plugin upload (a JobSpec, a policy, JSON requests) and of a submission's `spec` part (KiB, 1..=65536)",
    ),
    Var::new(
        "FORGE_MAX_FIELD_ERRORS",
        Fallback::Value("20"),
        |d, _, v| put(&mut d.cfg.gateway.max_field_errors, int(v, 1, 10_000)),
        "most field problems listed in one `invalid-spec` answer; the rest are counted in `details.omitted` (1..=10000)",
    ),
    Var::new(
        "FORGE_SUBMISSIONS_PER_MINUTE",
        Fallback::Value("600"),
        |d, _, v| put(&mut d.cfg.gateway.submissions_per_minute, int(v, 0, 1_000_000)),
        "job submissions one team may make per minute on each replica, with bursts up to that many (0: unlimited); more get 429 `rate-limited` with `Retry-After`",
    ),
    Var::new(
        "FORGE_MAX_QUEUED_PER_TEAM",
        Fallback::Value("1000"),
        |d, _, v| put(&mut d.cfg.gateway.max_queued_per_team, int(v, 0, 10_000_000)),
        "jobs one team may have waiting in the queue (0: unlimited); a submission beyond it gets 429 `queue-full`",
    ),
    Var::new(
        "FORGE_BODY_IDLE_TIMEOUT_S",
        Fallback::Value("60"),
        |d, _, v| put(&mut d.cfg.gateway.body_idle_timeout_s, int(v, 1, 3600)),
        "longest pause allowed in the body of a code archive, upload chunk or plugin upload (seconds; those have no total deadline, other requests must be answered within 60 s)",
    ),
    Var::new(
        "FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD",
        Fallback::Value("16777216"),
        |d, _, v| {
            put(
                &mut d.cfg.gateway.log_archive_max_bytes_per_pod,
                int(v, 1024, 1 << 30),
            )
        },
        "most bytes of one container's log of one pod archived when a job ends (its tail is kept, after a marker line saying how much was cut) and held in memory to answer a live `tail=` log read (1024..=1073741824)",
    ),
    Var::new(
        "FORGE_RETENTION_REJECTED_S",
        Fallback::Value("2592000"),
        |d, _, v| put(&mut d.cfg.gateway.retention_rejected_s, int(v, 0, 315_360_000)),
        "how long a rejected submission (its record, history and decision) is kept (seconds; 0: forever; default 30 days)",
    ),
    Var::new(
        "FORGE_RETENTION_LOGS_S",
        Fallback::Value("2592000"),
        |d, _, v| put(&mut d.cfg.gateway.retention_logs_s, int(v, 0, 315_360_000)),
        "how long a job's archived logs are kept after it ended; the job stays, its log routes then answer 410 `logs-expired` (seconds; 0: forever; default 30 days)",
    ),
    Var::new(
        "FORGE_RETENTION_CAPSULES_S",
        Fallback::Value("1209600"),
        |d, _, v| put(&mut d.cfg.gateway.retention_capsules_s, int(v, 0, 315_360_000)),
        "how long a team keeps the right to name a capsule after its last upload or use of it; bytes no team has a right to (and no job that has not ended uses) are deleted (seconds; 0: forever; default 14 days)",
    ),
    Var::new(
        "FORGE_RETENTION_SWEEP_S",
        Fallback::Value("3600"),
        |d, _, v| put(&mut d.cfg.gateway.retention_sweep_s, int(v, 1, 86_400)),
        "how often the leader deletes what is past its retention and measures what object storage holds (`forge_storage_bytes`); at most the shortest retention set (seconds, 1..=86400)",
    ),
    Var::new(
        "FORGE_PREEMPTION_MAX_GRACE_S",
        Fallback::Value("600"),
        |d, _, v| put(&mut d.cfg.gateway.preemption_max_grace_s, int(v, 1, 86_400)),
        "the most a job may ask as `deadlines.checkpointGraceSeconds`: how long a preempted job has to checkpoint and exit (seconds, 1..=86400; a job's default is 60)",
    ),
    Var::new(
        "FORGE_PREEMPTION_WINDOW_S",
        Fallback::Value("3600"),
        |d, _, v| put(&mut d.cfg.gateway.preemption_window_s, int(v, 1, 604_800)),
        "the window preemptions are counted in: a job preempted `FORGE_PREEMPTION_MAX_IN_WINDOW` times within it is not preempted again until the oldest leaves it; how a job answered its last notice is remembered as long (seconds, 1..=604800)",
    ),
    Var::new(
        "FORGE_PREEMPTION_MAX_IN_WINDOW",
        Fallback::Value("3"),
        |d, _, v| put(&mut d.cfg.gateway.preemption_max_in_window, int(v, 0, 1000)),
        "how many times a job may be preempted within `FORGE_PREEMPTION_WINDOW_S`; 0 turns preemption off (0..=1000)",
    ),
    Var::new(
        "FORGE_FAIR_SHARE_HALF_LIFE_S",
        Fallback::Value("604800"),
        |d, _, v| put(&mut d.cfg.gateway.fair_share_half_life_s, int(v, 1, 31_536_000)),
        "the half-life of a team's past GPU use in the fair-share order: what it used this long ago counts half (seconds, 1..=31536000; default 7 days; 0 is refused, not read as off)",
    ),
    Var::new(
        "FORGE_PLAYGROUND_MIN_TTL_S",
        Fallback::Value("60"),
        |d, _, v| put(&mut d.cfg.gateway.playground_min_ttl_s, int(v, 1, 3600)),
        "the shortest `ttlSeconds` and `idleSeconds` a playground may ask for (seconds, 1..=3600)",
    ),
    Var::new(
        "FORGE_PLAYGROUND_STARTUP_S",
        Fallback::Value("1800"),
        |d, _, v| put(&mut d.cfg.gateway.playground_startup_s, int(v, 60, 14_400)),
        "how long a playground's server may take to load its model (its startup probe) before the kubelet restarts it; the state shows `loading` meanwhile (seconds, 60..=14400)",
    ),
    Var::new(
        "FORGE_UPLOAD_MAX_SESSIONS",
        Fallback::Value("4"),
        |d, _, v| put(&mut d.cfg.gateway.upload_max_sessions, int(v, 1, 1024)),
        "open resumable upload sessions one team may have (> 0)",
    ),
    Var::new(
        "FORGE_UPLOAD_TTL_S",
        Fallback::Value("86400"),
        |d, _, v| put(&mut d.cfg.gateway.upload_ttl_s, int(v, 1, 2_592_000)),
        "an upload session untouched this long is abandoned and removed (seconds, > 0)",
    ),
    Var::new(
        "FORGE_CAPSULE_INIT_IMAGE",
        Fallback::Value("busybox:1.36"),
        |d, _, v| put(&mut d.cfg.gateway.capsule_init_image, image(v)),
        "image of the `forge-capsule-fetch` init container (needs `sh`, `wget`, `sha256sum`)",
    ),
    Var::new(
        "FORGE_PUBLIC_URL",
        NONE,
        |d, _, v| put(&mut d.cfg.gateway.public_url, url(v).map(Some)),
        "external base URL of the gateway (`http(s)://…`), used in capsule URLs",
    ),
    Var::new(
        "FORGE_POLICY_CHAIN_FILE",
        Fallback::Unset("— (required by `serve`)"),
        |d, _, v| {
            put(
                &mut d.cfg.gateway.policy_chain_file,
                Ok(Some(PathBuf::from(v))),
            )
        },
        "start-up policy chain file (`serve --policy-chain` wins over it): ordered plugins and settings, see `deploy/kubernetes/policy-chain.yaml.example`. It becomes global version 1 of a fresh store; once the store has a policy, the stored active chain is restored instead (change it with `PUT /v1/policy`)",
    ),
];

/// Whether a variable name is one of the table's (a config file key must be).
pub fn is_known(var: &str) -> bool {
    VARS.iter().any(|v| v.name.matches(var))
}

/// The framework served by an image variable: `FORGE_IMAGE_NEMO_RL` → `nemo-rl`.
pub fn framework_of_image_var(var: &str) -> Option<String> {
    var.strip_prefix(IMAGE_PREFIX)
        .map(|f| f.to_ascii_lowercase().replace('_', "-"))
}

/// The default of `FORGE_POLICY_CONCURRENCY`.
fn cpu_count() -> String {
    std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .to_string()
}
