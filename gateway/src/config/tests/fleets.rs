//! `FORGE_FLEETS_FILE`: a file read into fleets, the `FORGE_K8S_*` settings as the
//! fleet `default` without it, and one test per rejection (of an entry alone, and of
//! the file with the other variables).

use std::path::Path;

use super::super::fleets::MAX_FLEETS;
use super::super::model::FleetConnection;
use super::*;

/// A directory with the fleets file `text` and a token file, a CA file and a
/// kubeconfig (contexts `one` and `two`) it may name.
struct Files {
    dir: tempfile::TempDir,
}

const KUBECONFIG: &str = "apiVersion: v1
kind: Config
current-context: one
clusters:
- {name: c1, cluster: {server: 'https://10.0.0.1:6443'}}
users:
- {name: u, user: {token: kubeconfig-token}}
contexts:
- {name: one, context: {cluster: c1, user: u}}
- {name: two, context: {cluster: c1, user: u}}
";

impl Files {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("token"), "t0ken\n").expect("token");
        std::fs::write(dir.path().join("ca.pem"), "pem").expect("ca");
        std::fs::write(dir.path().join("eu.kubeconfig"), KUBECONFIG).expect("kubeconfig");
        Files { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `text` with `$DIR` replaced by the directory, written as the fleets file.
    fn fleets(&self, text: &str) -> String {
        let path = self.path("fleets.yaml");
        let text = text.replace("$DIR", &self.dir.path().display().to_string());
        std::fs::write(&path, text).expect("fleets file");
        path
    }

    fn load(&self, text: &str, pairs: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
        let mut env = with(pairs);
        env.insert("FORGE_FLEETS_FILE".into(), self.fleets(text));
        Config::from_env_map(env)
    }

    /// The one problem of loading `text`: its variable and its reason.
    fn problem(&self, text: &str, pairs: &[(&str, &str)]) -> (String, String) {
        match self.load(text, pairs) {
            Ok(c) => panic!("expected a problem, got {:?}", c.fleets),
            Err(ConfigErrors(e)) => {
                assert_eq!(e.len(), 1, "{e:?}");
                let reason = match &e[0] {
                    ConfigError::Invalid { reason, .. } | ConfigError::Requires { reason, .. } => {
                        reason.clone()
                    }
                    other => panic!("{other:?}"),
                };
                (e[0].var().to_string(), reason)
            }
        }
    }

    /// One of the problems of `text` (among others, such as "more than one fleet")
    /// is FORGE_FLEETS_FILE's and says `says`.
    fn rejects_among_others(&self, text: &str, says: &str) {
        let Err(ConfigErrors(e)) = self.load(text, &[]) else {
            panic!("expected problems");
        };
        assert!(
            e.iter()
                .any(|e| e.var() == "FORGE_FLEETS_FILE" && e.to_string().contains(says)),
            "{e:?} should say {says:?}"
        );
    }

    /// The one problem of `text` is FORGE_FLEETS_FILE's and says `says`.
    fn rejects(&self, text: &str, says: &str) {
        let (var, reason) = self.problem(text, &[]);
        assert_eq!(var, "FORGE_FLEETS_FILE", "{reason}");
        assert!(reason.contains(says), "{reason:?} should say {says:?}");
    }
}

const EU: &str = "- name: eu
  kind: kuberay
  kubeconfig: $DIR/eu.kubeconfig
";

#[test]
fn without_a_file_the_k8s_settings_are_the_fleet_default() {
    let c = Config::from_env_map(base()).expect("valid");
    assert_eq!(c.fleets, None);
    let fleets = c.fleets();
    assert_eq!(fleets.len(), 1);
    assert_eq!(fleets[0].name, DEFAULT_FLEET);
    assert_eq!(fleets[0].connection, FleetConnection::Settings);
    assert_eq!(fleets[0].namespace_in(&c), "starforge");
}

#[test]
fn a_fleets_file_is_read() {
    let f = Files::new();
    let c = f
        .load(
            "- name: eu-west
  kind: kuberay
  kubeconfig: $DIR/eu.kubeconfig
  context: two
  namespace: forge-jobs
  labels: {region: eu, starforge.io/tier: gold}
",
            &[],
        )
        .expect("valid");
    let fleets = c.fleets();
    assert_eq!(fleets.len(), 1);
    let eu = &fleets[0];
    assert_eq!(eu.name, "eu-west");
    assert_eq!(
        eu.connection,
        FleetConnection::Kubeconfig {
            path: Path::new(&f.path("eu.kubeconfig")).to_path_buf(),
            context: Some("two".into()),
        }
    );
    assert_eq!(eu.namespace_in(&c), "forge-jobs");
    assert_eq!(eu.labels["region"], "eu");
    let c = f
        .load(
            "- name: us
  kind: kuberay
  apiServer: https://10.1.0.1:6443
  tokenFile: $DIR/token
  caFile: $DIR/ca.pem
",
            &[],
        )
        .expect("valid");
    assert_eq!(
        c.fleets()[0].connection,
        FleetConnection::ApiServer {
            url: "https://10.1.0.1:6443".into(),
            token_file: Some(f.path("token").into()),
            ca_file: Some(f.path("ca.pem").into()),
            insecure_skip_tls_verify: false,
        }
    );
    assert_eq!(c.fleets()[0].namespace_in(&c), "starforge");
}

#[test]
fn rejects_a_relative_or_missing_file() {
    assert_eq!(
        only_error_var(&[("FORGE_FLEETS_FILE", "fleets.yaml")]),
        "FORGE_FLEETS_FILE"
    );
    assert_eq!(
        only_error_var(&[("FORGE_FLEETS_FILE", "/nonexistent/fleets.yaml")]),
        "FORGE_FLEETS_FILE"
    );
}

#[test]
fn rejects_a_file_that_is_not_a_list_of_fleets() {
    Files::new().rejects("name: eu\nkind: kuberay\n", "fleets.yaml");
    Files::new().rejects("[]\n", "lists no fleet");
    let many: String = (0..=MAX_FLEETS)
        .map(|i| format!("- {{name: f{i}, kind: kuberay, apiServer: 'https://10.0.0.{i}'}}\n"))
        .collect();
    Files::new().rejects(&many, &format!("at most {MAX_FLEETS}"));
}

#[test]
fn rejects_an_unknown_field_without_echoing_its_value() {
    let f = Files::new();
    let (_, reason) = f.problem(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1', token: s3cret-value}\n",
        &[],
    );
    assert!(reason.contains("token"), "{reason}");
    assert!(!reason.contains("s3cret-value"), "{reason}");
}

#[test]
fn rejects_an_unknown_kind() {
    Files::new().rejects(
        "- {name: eu, kind: slurm, apiServer: 'https://10.0.0.1'}\n",
        "slurm",
    );
}

#[test]
fn rejects_both_or_neither_connection() {
    let f = Files::new();
    f.rejects(
        "- {name: eu, kind: kuberay, kubeconfig: $DIR/eu.kubeconfig, apiServer: 'https://x'}\n",
        "fleet `eu`: set kubeconfig or apiServer, not both",
    );
    f.rejects(
        "- {name: eu, kind: kuberay}\n",
        "fleet `eu`: set kubeconfig, or apiServer",
    );
}

#[test]
fn rejects_api_server_fields_on_a_kubeconfig() {
    Files::new().rejects(
        "- {name: eu, kind: kuberay, kubeconfig: $DIR/eu.kubeconfig, tokenFile: $DIR/token}\n",
        "tokenFile applies to apiServer",
    );
}

#[test]
fn rejects_a_context_without_a_kubeconfig() {
    Files::new().rejects(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1', context: two}\n",
        "context applies to a kubeconfig",
    );
}

#[test]
fn rejects_a_ca_file_with_insecure_skip_tls_verify() {
    Files::new().rejects(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1', caFile: $DIR/ca.pem, \
         insecureSkipTlsVerify: true}\n",
        "set caFile or insecureSkipTlsVerify, not both",
    );
}

#[test]
fn rejects_an_api_server_that_is_not_a_url() {
    Files::new().rejects(
        "- {name: eu, kind: kuberay, apiServer: '10.0.0.1:6443'}\n",
        "apiServer: `10.0.0.1:6443` is not an http(s) URL",
    );
}

#[test]
fn rejects_a_name_namespace_or_label_kubernetes_cannot_hold() {
    let f = Files::new();
    f.rejects(
        "- {name: EU_West, kind: kuberay, apiServer: 'https://10.0.0.1'}\n",
        "name:",
    );
    f.rejects(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1', namespace: 'a b'}\n",
        "namespace:",
    );
    f.rejects(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1', labels: {region: 'e u'}}\n",
        "labels.region:",
    );
}

#[test]
fn rejects_two_fleets_of_one_name() {
    Files::new().rejects_among_others(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1'}
- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.2'}
",
        "two fleets are named `eu`",
    );
}

#[test]
fn rejects_one_cluster_and_namespace_twice() {
    Files::new().rejects_among_others(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1'}
- {name: eu2, kind: kuberay, apiServer: 'https://10.0.0.1/'}
",
        "`eu` and `eu2` are the same cluster",
    );
}

#[test]
fn rejects_a_file_a_fleet_names_that_cannot_be_read() {
    Files::new().rejects(
        "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1', tokenFile: $DIR/absent}\n",
        "fleet `eu`: tokenFile",
    );
}

#[test]
fn rejects_a_kubeconfig_context_that_is_not_there() {
    Files::new().rejects(
        "- {name: eu, kind: kuberay, kubeconfig: $DIR/eu.kubeconfig, context: three}\n",
        "has no context `three`",
    );
}

#[test]
fn rejects_the_single_cluster_connection_beside_the_file() {
    let f = Files::new();
    let (var, reason) = f.problem(EU, &[("FORGE_K8S_API_SERVER", "https://10.0.0.9:6443")]);
    assert_eq!(var, "FORGE_K8S_API_SERVER");
    assert!(reason.contains("set it on the fleet"), "{reason}");
}

#[test]
fn rejects_fleets_with_the_local_fleet_kind() {
    let f = Files::new();
    let (var, _) = f.problem(EU, &[("FORGE_DEFAULT_FLEET_KIND", "local")]);
    assert_eq!(var, "FORGE_FLEETS_FILE");
}

#[test]
fn several_fleets_are_read_in_their_order() {
    let c = Files::new()
        .load(
            "- {name: eu, kind: kuberay, apiServer: 'https://10.0.0.1'}
- {name: us, kind: kuberay, apiServer: 'https://10.0.0.2', namespace: forge-us}
",
            &[],
        )
        .expect("two fleets are valid");
    let fleets = c.fleets();
    let names: Vec<&str> = fleets.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["eu", "us"]);
    assert_eq!(fleets[1].namespace_in(&c), "forge-us");
}
