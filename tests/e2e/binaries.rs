//! The server binaries report a failure the way the `forge` CLI does: one `error: …`
//! line on stderr and a non-zero exit code — no backtrace, though these machines set
//! `RUST_BACKTRACE=1` (an operator reads it in a pod's log or a terminal).

use std::process::Command;

use forge_tests::procs::binary;

/// Runs `name args` with `env` (and `RUST_BACKTRACE=1`); its exit code and stderr.
fn failing(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(binary(name))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LOG", "off")
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .output()
        .expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_one_line_error(stderr: &str, says: &str) {
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    assert!(stderr.contains(says), "expected {says:?} in {stderr}");
}

#[test]
fn the_gateway_reports_a_bad_configuration_in_one_line() {
    let (code, stderr) = failing(
        "forge-gateway",
        &["serve"],
        &[
            ("FORGE_POLICY_DEADLINE_MS", "soon"),
            ("FORGE_KUBERAY_RAY_VERSION", "2.55.1"),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert_one_line_error(&stderr, "FORGE_POLICY_DEADLINE_MS");
    // Several problems: the count, then one a line — still no backtrace.
    let (code, stderr) = failing(
        "forge-gateway",
        &["serve"],
        &[("FORGE_POLICY_DEADLINE_MS", "soon")],
    );
    assert_eq!(code, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.trim_end().lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines[0].starts_with("error: invalid configuration (2 problem(s))"),
        "{stderr}"
    );
    assert!(lines[1].contains("FORGE_POLICY_DEADLINE_MS"), "{stderr}");
    assert!(lines[2].contains("FORGE_KUBERAY_RAY_VERSION"), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
}

#[test]
fn the_emulator_reports_a_bad_flag_value_in_one_line() {
    let (code, stderr) = failing("forge-kubesim", &["--mode", "sideways"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_one_line_error(&stderr, "sideways");
}

/// `dev --ray-venv` naming a directory without Ray is refused at start, in one line
/// saying which file is missing and how to make a Ray virtualenv.
#[test]
fn dev_refuses_a_ray_venv_without_ray_in_one_line() {
    let empty = tempfile::tempdir().expect("tempdir");
    let venv = empty.path().display().to_string();
    let (code, stderr) = failing(
        "forge-gateway",
        &["dev", "--ray-venv", &venv],
        &[("FORGE_LISTEN", "127.0.0.1:0")],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert_one_line_error(&stderr, "--ray-venv");
    assert!(
        stderr.contains("is not a virtualenv with Ray") && stderr.contains("install-ray.sh"),
        "{stderr}"
    );
}
