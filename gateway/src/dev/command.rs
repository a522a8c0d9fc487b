//! `forge-gateway dev`: its flags, and the run — listen on loopback, start the
//! emulator and the gateway ([`super::start`]), print what a developer needs (the URL,
//! a fresh admin token, the tokens file's entries, the kubeconfig, the sample job's
//! submit command), then serve until a signal.

use std::path::PathBuf;

use anyhow::Context;

use super::{DevOptions, SimMode, check_listen, sample::write_sample, start};
use crate::auth::Role;
use crate::compose::{serve, spawn_controllers};

/// The flags of `forge-gateway dev`.
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Node layout: series=NODESxGPUS, comma separated.
    #[arg(long, default_value = "h100=2x8,h200=2x8")]
    nodes: String,
    /// Directory with the built reference policy components.
    #[arg(long, default_value = "target/plugins/components")]
    plugins_dir: PathBuf,
    /// How the embedded cluster runs jobs.
    #[arg(long, value_enum, default_value = "process")]
    sim: SimMode,
    /// Run this chain file instead of the reference chain.
    #[arg(long)]
    policy_chain: Option<PathBuf>,
    /// An image whose pulls fail in the embedded cluster (repeatable).
    #[arg(long = "failing-image")]
    failing_images: Vec<String>,
    /// Listen on a non-loopback FORGE_LISTEN (dev mode runs job code as your own
    /// processes and prints an admin token: only for a machine you alone use).
    #[arg(long)]
    allow_remote: bool,
    /// Play a KubeRay operator that predates `preRunningDeadlineSeconds` (ignores it):
    /// the gateway's own pre-running deadline still times jobs out.
    #[arg(long)]
    old_operator: bool,
    /// The virtualenv with `ray[default]` the embedded cluster's Ray nodes run
    /// (`bash deploy/install-ray.sh` makes target/ray); without it Ray is simulated.
    #[arg(long, env = "FORGE_DEV_RAY_VENV")]
    ray_venv: Option<PathBuf>,
    /// Emulated clusters the gateway drives as fleets `fleet-1`, `fleet-2`, … (each
    /// with the node layout; a kubeconfig each in the data directory).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8))]
    fleets: u8,
}

/// Runs `forge-gateway dev` with the process's `FORGE_*` environment until SIGINT or
/// SIGTERM.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let opts = DevOptions {
        nodes: args.nodes,
        plugins_dir: args.plugins_dir,
        env: std::env::vars()
            .filter(|(k, _)| k.starts_with("FORGE_"))
            .collect(),
        sim: args.sim,
        policy_chain: args.policy_chain,
        failing_images: args.failing_images,
        old_operator: args.old_operator,
        ray_venv: args.ray_venv,
        fleets: usize::from(args.fleets),
    };
    let listen = opts
        .env
        .get("FORGE_LISTEN")
        .map(|l| l.parse())
        .transpose()
        .context("FORGE_LISTEN")?
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8080)));
    check_listen(listen, args.allow_remote)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let url = format!("http://{}", listener.local_addr()?);
    let public: url::Url = url.parse().context("listen URL")?;
    let dev = start(&opts, &public).await?;
    let controllers = spawn_controllers(&dev.state);
    print_welcome(&dev, &url)?;
    let shutdown = dev.state.shutdown.clone();
    serve(listener, crate::router(dev.state), shutdown).await?;
    controllers.shutdown().await;
    dev.sim.shutdown().await;
    for sim in dev.other_fleets {
        sim.shutdown().await;
    }
    Ok(())
}

/// What `dev` prints once it listens (the tests and scripts read the `token:` line).
fn print_welcome(dev: &super::DevGateway, url: &str) -> anyhow::Result<()> {
    let sample = write_sample(&dev.state.config.gateway.data_dir)?;
    let token = &dev.token;
    println!("Forge gateway (dev) listening on {url}");
    println!("  token:      {token}");
    println!("              (admin of team-a, fresh at every start)");
    let tokens_file = dev.state.config.gateway.tokens_file.as_deref();
    for line in tokens_file_lines(tokens_file) {
        println!("  {line}");
    }
    println!(
        "  kubeconfig: {0}  (kubectl --kubeconfig {0} get rayjobs,pods -w)",
        dev.kubeconfig.display()
    );
    for i in 2..=dev.other_fleets.len() + 1 {
        let file = dev
            .state
            .config
            .gateway
            .data_dir
            .join(format!("kubeconfig-fleet-{i}"));
        println!("  fleet-{i}:    {}", file.display());
    }
    println!("  submit the sample job:");
    println!(
        "    curl -s -H 'Authorization: Bearer {token}' -F spec=@{} -F code=@{} {url}/v1/jobs",
        sample.spec.display(),
        sample.code.display()
    );
    println!("  then: curl -s -H 'Authorization: Bearer {token}' {url}/v1/jobs/<id>");
    println!("        curl -s -H 'Authorization: Bearer {token}' {url}/v1/jobs/<id>/logs");
    Ok(())
}

/// What `dev` prints about the tokens file (`FORGE_TOKENS_FILE`) beside its own fresh
/// token: one line per entry (its name, team and role — the file holds only hashes, so
/// there is no token to show), or why the file could not be read.
pub fn tokens_file_lines(file: Option<&std::path::Path>) -> Vec<String> {
    let Some(file) = file else {
        return Vec::new();
    };
    let entries = match crate::auth::Tokens::read_entries(file) {
        Ok(entries) => entries,
        Err(e) => return vec![format!("tokens file {}: {e}", file.display())],
    };
    let mut lines = vec![format!(
        "tokens file {} ({} entries, reloaded when it changes):",
        file.display(),
        entries.len()
    )];
    for e in entries {
        let role = match e.role {
            Role::Admin => "admin",
            Role::Member => "member",
        };
        let name = e.name.unwrap_or_else(|| {
            let short: String = e.token_sha256.chars().take(12).collect();
            format!("sha256 {short}…")
        });
        lines.push(format!("  {name}: team {}, {role}", e.team));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::hash_token;

    #[test]
    fn tokens_file_entries_are_listed_without_tokens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("tokens.yaml");
        let sha = hash_token("s3cret");
        std::fs::write(
            &file,
            format!(
                "tokens:\n  - {{token_sha256: {sha}, team: team-b, role: member, name: ci}}\n  \
                 - {{token_sha256: {sha}, team: ops, role: admin}}\n"
            ),
        )
        .expect("write");
        let lines = tokens_file_lines(Some(&file));
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("2 entries"), "{lines:?}");
        assert_eq!(lines[1], "  ci: team team-b, member");
        assert_eq!(
            lines[2],
            format!("  sha256 {}…: team ops, admin", &sha[..12])
        );
        assert!(tokens_file_lines(None).is_empty());
        let missing = tokens_file_lines(Some(&dir.path().join("none.yaml")));
        assert!(missing[0].contains("none.yaml"), "{missing:?}");
    }
}
